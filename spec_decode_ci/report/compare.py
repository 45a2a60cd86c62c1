"""What moved between a run's results and an earlier run's (its baseline), figure by figure.

A mark says which figure of which case moved, how, and whether it got worse. The tolerances are the report's
options: acceptance per draft position (absolute, in accepted drafts per drafting step), the ratio engine start
time may grow by, and the share speed (the speedup, the speculative engine's tokens/s) may fall by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spec_decode_ci.results import (
    ACCEPTANCE_LENGTH, ACCEPTANCE_PER_POSITION, ENGINE_START_S, HOST_SYNC_SITES, HOST_SYNCS_PER_STEP_MAX,
    MUTATION_SCORE, SPEED, step_key,
)

ACCEPTANCE_TOLERANCE = 0.05  # a rate per draft position that moves less than this is noise
START_RATIO = 1.5  # engine start this many times the baseline's is a regression (compile caches, loading)
# A speed figure (speedup; the speculative engine's output tokens/s) this share below the baseline's is marked. Not
# yet measured: the spread bench/speed_spread.py prints over fresh engines on one GPU is to set it.
SPEED_TOLERANCE = 0.10
RED = ("failed", "error")


@dataclass(frozen=True)
class Mark:
    """One figure of one case that moved (or left its prediction)."""

    case: str
    figure: str
    text: str
    worse: bool


def baseline_for(results: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The candidate run of the same step, the latest finished; a sole candidate where steps are not named."""
    key = step_key(results)
    same = [c for c in candidates if step_key(c) == key]
    if not same and len(candidates) == 1 and (key is None or step_key(candidates[0]) is None):
        same = candidates
    return max(same, key=lambda c: c["finished_at"], default=None)


def _rates(figure: Any, which: str) -> list[float] | None:
    if not isinstance(figure, dict):
        return None
    rates = figure.get(which)
    return rates if isinstance(rates, list) and all(isinstance(r, (int, float)) for r in rates) else None


def _number(figure: Any) -> float | None:
    return float(figure) if isinstance(figure, (int, float)) and not isinstance(figure, bool) else None


def against_prediction(case: dict[str, Any], tolerance: float) -> list[Mark]:
    """Positions whose measured acceptance leaves the expected one (a reference or the construction's) by more
    than ``tolerance``."""
    figure = case["figures"].get(ACCEPTANCE_PER_POSITION)
    measured, expected = _rates(figure, "measured"), _rates(figure, "expected")
    if measured is None or not expected:
        return []
    return [Mark(case["id"], ACCEPTANCE_PER_POSITION, f"position {i}: {m:.3f}, expected {e:.3f}", m < e)
            for i, (m, e) in enumerate(zip(measured, expected)) if abs(m - e) > tolerance]


def against_baseline(case: dict[str, Any], before: dict[str, Any] | None, tolerance: float,
                     start_ratio: float, speed_tolerance: float = SPEED_TOLERANCE) -> list[Mark]:
    """The figures of ``case`` that moved against the same case of the baseline run."""
    cid = case["id"]
    if before is None:
        return [Mark(cid, "case", "new: not in the baseline", False)]
    now, was = case["figures"], before["figures"]
    marks = []
    measured, earlier = _rates(now.get(ACCEPTANCE_PER_POSITION), "measured"), \
        _rates(was.get(ACCEPTANCE_PER_POSITION), "measured")
    if measured is not None and earlier is not None:
        if len(measured) != len(earlier):
            marks.append(Mark(cid, ACCEPTANCE_PER_POSITION,
                              f"{len(measured)} draft positions, baseline {len(earlier)}", True))
        for i, (m, e) in enumerate(zip(measured, earlier)):
            if abs(m - e) > tolerance:
                marks.append(Mark(cid, ACCEPTANCE_PER_POSITION, f"position {i}: {m:.3f}, baseline {e:.3f}", m < e))
    length, length_was = _number(now.get(ACCEPTANCE_LENGTH)), _number(was.get(ACCEPTANCE_LENGTH))
    if length is not None and length_was and abs(length - length_was) > tolerance * length_was:
        marks.append(Mark(cid, ACCEPTANCE_LENGTH, f"{length:.3f}, baseline {length_was:.3f}", length < length_was))
    sites, sites_was = now.get(HOST_SYNC_SITES), was.get(HOST_SYNC_SITES)
    if isinstance(sites, dict) and isinstance(sites_was, dict):
        for site in sorted(set(sites) - set(sites_was)):
            marks.append(Mark(cid, HOST_SYNC_SITES, f"new sync site {site} (x{sites[site]})", True))
    per_step, per_step_was = _number(now.get(HOST_SYNCS_PER_STEP_MAX)), _number(was.get(HOST_SYNCS_PER_STEP_MAX))
    if per_step is not None and per_step_was is not None and per_step != per_step_was:
        marks.append(Mark(cid, HOST_SYNCS_PER_STEP_MAX, f"{per_step:g} per step, baseline {per_step_was:g}",
                          per_step > per_step_was))
    start, start_was = now.get(ENGINE_START_S), was.get(ENGINE_START_S)
    if isinstance(start, dict) and isinstance(start_was, dict):
        for run in sorted(set(start) & set(start_was)):
            s, b = _number(start[run]), _number(start_was[run])
            if s is not None and b and s > b * start_ratio:
                marks.append(Mark(cid, ENGINE_START_S, f"{run} engine start {s:.1f} s, baseline {b:.1f} s "
                                                       f"(over {start_ratio:g}x)", True))
    marks += _mutation_score_fell(cid, now.get(MUTATION_SCORE), was.get(MUTATION_SCORE))
    marks += _speed_fell(cid, now.get(SPEED), was.get(SPEED), speed_tolerance)
    outcome_was = {c["test"]: c["outcome"] for c in before["checks"]}
    for check in case["checks"]:
        was_outcome = outcome_was.get(check["test"])
        if check["outcome"] in RED and was_outcome not in RED and was_outcome is not None:
            marks.append(Mark(cid, "check", f"{check['test']}: {check['outcome']} (baseline {was_outcome})", True))
    return marks


def _mutation_score_fell(cid: str, now: Any, was: Any) -> list[Mark]:
    """A lower kill rate than the baseline's over as many mutants of as many generated (the same draw)."""
    if not (isinstance(now, dict) and isinstance(was, dict)):
        return []
    rate, rate_was = _number(now.get("rate")), _number(was.get("rate"))
    same_draw = (now.get("run"), now.get("generated")) == (was.get("run"), was.get("generated"))
    if rate is None or rate_was is None or not same_draw or rate >= rate_was:
        return []
    return [Mark(cid, MUTATION_SCORE, f"{rate:.1%} of the non-equivalent mutants killed, baseline {rate_was:.1%}",
                 True)]


def _speed_fell(cid: str, now: Any, was: Any, tolerance: float) -> list[Mark]:
    """The speedup, or the speculative engine's output tokens/s, more than ``tolerance`` below the baseline's."""
    if not (isinstance(now, dict) and isinstance(was, dict)):
        return []
    pairs = [("speedup", _number(now.get("speedup")), _number(was.get("speedup")), "x"),
             ("speculative tokens/s", _number((now.get("speculative") or {}).get("tokens_per_s")),
              _number((was.get("speculative") or {}).get("tokens_per_s")), " tokens/s")]
    return [Mark(cid, SPEED, f"{what} {value:g}{unit}, baseline {before:g}{unit} ({value / before - 1:+.0%}, "
                             f"tolerance {tolerance:.0%})", True)
            for what, value, before, unit in pairs
            if value is not None and before and value < before * (1 - tolerance)]


def compare(results: dict[str, Any], baseline: dict[str, Any] | None, tolerance: float = ACCEPTANCE_TOLERANCE,
            start_ratio: float = START_RATIO, speed_tolerance: float = SPEED_TOLERANCE) -> list[Mark]:
    """Every mark of ``results``: each case against its prediction and, given a baseline run, against the same
    case there (cases the baseline had and this run lacks included)."""
    marks: list[Mark] = []
    earlier = {c["id"]: c for c in baseline["cases"]} if baseline else {}
    for case in results["cases"]:
        marks += against_prediction(case, tolerance)
        if baseline is not None:
            marks += against_baseline(case, earlier.get(case["id"]), tolerance, start_ratio, speed_tolerance)
    if baseline is not None:
        present = {c["id"] for c in results["cases"]}
        marks += [Mark(cid, "case", "gone: in the baseline, not in this run", True)
                  for cid in earlier if cid not in present]
    return marks
