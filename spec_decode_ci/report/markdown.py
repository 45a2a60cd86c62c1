"""The Markdown a step hands ``buildkite-agent annotate``: a verdict, failures first, one table row per case."""

from __future__ import annotations

from typing import Any

import jinja2

from spec_decode_ci.report.compare import RED, Mark
from spec_decode_ci.results import (
    ACCEPTANCE_LENGTH, ACCEPTANCE_PER_POSITION, CUDA_GRAPHS, ENGINE_START_S, HOST_SYNCS_PER_STEP_MAX, OUTCOMES,
    MUTATION_SCORE, SPEED, VLLM_AREA_DRIFT,
)

ICONS = {"failed": "❌", "error": "💥", "passed": "✅", "skipped": "⏭️"}
WORSE, BETTER = "⚠️", "▲"
NONE = "–"

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("spec_decode_ci.report", "templates"),
                          undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
                          autoescape=False)


def cell(text: Any) -> str:
    """``text`` as one table cell: no line breaks, ``|`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|") or NONE


def red(results: dict[str, Any]) -> bool:
    return results["exit_status"] != 0 or any(results["summary"].get(o, 0) for o in RED)


def _worst(checks: list[dict[str, Any]]) -> str:
    return min((c["outcome"] for c in checks), key=OUTCOMES.index, default="passed")


def _counts(checks: list[dict[str, Any]]) -> str:
    tally = {o: sum(c["outcome"] == o for c in checks) for o in OUTCOMES}
    return " ".join(f"{ICONS[o]} {n}" for o, n in tally.items() if n) or NONE


def _per_position(figure: Any, marked: list[Mark]) -> str:
    if not isinstance(figure, dict) or not figure.get("measured"):
        return NONE
    text = " ".join(f"{r:.2f}" for r in figure["measured"])
    if figure.get("expected"):
        text += " (expected " + " ".join(f"{r:.2f}" for r in figure["expected"]) + ")"
    return _flag(text, ACCEPTANCE_PER_POSITION, marked)


def _flag(text: str, figure: str, marked: list[Mark]) -> str:
    mine = [m for m in marked if m.figure == figure]
    if any(m.worse for m in mine):
        return f"{WORSE} {text}"
    return f"{BETTER} {text}" if mine else text


def _plain(value: Any, figure: str, marked: list[Mark], fmt: str = "{:g}") -> str:
    if value is None:
        return NONE
    return _flag(fmt.format(value) if isinstance(value, (int, float)) else str(value), figure, marked)


def _start(figure: Any, marked: list[Mark]) -> str:
    if not isinstance(figure, dict):
        return NONE
    return _flag(" / ".join(f"{run} {s:g}" for run, s in figure.items()), ENGINE_START_S, marked)


def _graphs(figure: Any) -> str:
    """The resolved mode, then the target's spec-decode batches by runtime mode, and the mode the matrix asks."""
    if not isinstance(figure, dict):
        return NONE
    spec = (figure.get("dispatched") or {}).get("target.spec_decode") or {}
    batches = " ".join(f"{mode}×{n}" for mode, n in spec.items()) or "none"
    expected = f" (≥ {figure['expected']})" if figure.get("expected") else ""
    return f"{figure.get('resolved') or NONE}; spec batches {batches}{expected}"


def _share(value: Any) -> str:
    return NONE if value is None else f"{value:.0%}"


def _speed(figure: Any, marked: list[Mark]) -> str:
    """The speedup, then each engine's output tokens/s and the share of the run its GPU sat idle."""
    if not isinstance(figure, dict) or figure.get("speedup") is None:
        return NONE
    spec, target = figure.get("speculative") or {}, figure.get("target") or {}
    floor = f" (≥ {figure['floor']:g}x)" if figure.get("floor") is not None else ""
    text = (f"{figure['speedup']:.2f}x{floor}: {spec.get('tokens_per_s')} vs {target.get('tokens_per_s')} tok/s, "
            f"GPU idle {_share(spec.get('gpu_idle_share'))} vs {_share(target.get('gpu_idle_share'))}")
    return _flag(text, SPEED, marked)


def row(case: dict[str, Any], marks: list[Mark]) -> list[str]:
    figures = case["figures"]
    moved = "; ".join(f"{WORSE if m.worse else BETTER} {m.figure}: {m.text}" for m in marks)
    worst = _worst(case["checks"])
    icon = WORSE if worst == "passed" and any(m.worse for m in marks) else ICONS[worst]
    return [cell(v) for v in (
        f"{icon} {case['id']}", case.get("runner") or NONE, _counts(case["checks"]),
        _per_position(figures.get(ACCEPTANCE_PER_POSITION), marks),
        _plain(figures.get(ACCEPTANCE_LENGTH), ACCEPTANCE_LENGTH, marks, "{:.3f}"),
        _plain(figures.get(HOST_SYNCS_PER_STEP_MAX), HOST_SYNCS_PER_STEP_MAX, marks),
        _graphs(figures.get(CUDA_GRAPHS)), _speed(figures.get(SPEED), marks), _start(figures.get(ENGINE_START_S), marks),
        moved or NONE)]


def about(results: dict[str, Any]) -> str:
    vllm, device, step = results["vllm"], results["device"], results["step"]
    version = vllm.get("version") or "not installed"
    commit = f" ({vllm['commit'][:12]})" if vllm.get("commit") else ""
    summary = ", ".join(f"{n} {o}" for o, n in results["summary"].items() if n) or "no tests"
    parts = [f"vLLM {version}{commit}", f"device {device.get('name') or 'unnamed'}",
             f"runner {results.get('runner') or NONE}", summary]
    if step.get("build_url"):
        parts.append(f"[build {step.get('build_number') or ''}]({step['build_url']})")
    return " · ".join(parts)


def mutation_line(figure: dict[str, Any]) -> str:
    """One backend's mutation score: the rate, then the counts it is made of."""
    rate = NONE if figure.get("rate") is None else f"{figure['rate']:.1%}"
    return (f"{rate} of the non-equivalent mutants killed (goal {figure['goal']:.0%}): {figure['run']} of "
            f"{figure['generated']} run, {figure['killed']} killed, {figure['equivalent']} equivalent, "
            f"{len(figure['survivors'])} survived")


def render(results: dict[str, Any], marks: list[Mark], baseline_line: str) -> str:
    """The annotation of one run: ``marks`` from ``compare``, ``baseline_line`` what it was compared with."""
    by_case: dict[str, list[Mark]] = {}
    for mark in marks:
        by_case.setdefault(mark.case, []).append(mark)
    failures = [{"icon": ICONS[c["outcome"]], "test": c["test"], "message": cell(c["message"] or "")}
                for case in results["cases"] for c in case["checks"] if c["outcome"] in RED]
    cases = sorted(results["cases"], key=lambda c: (OUTCOMES.index(_worst(c["checks"])), c["id"]))
    title = results["step"].get("label") or results["step"].get("key") or "spec-decode-ci"
    drifts = [d for c in results["cases"] for d in [c["figures"].get(VLLM_AREA_DRIFT)]
              if isinstance(d, dict) and d.get("differs")]
    mutation = [{"backend": f["backend"], "line": mutation_line(f), "survivors": f["survivors"],
                 "stale_equivalents": f["stale_equivalents"]}
                for c in results["cases"] for f in [c["figures"].get(MUTATION_SCORE)] if isinstance(f, dict)]
    return _ENV.get_template("annotation.md.j2").render(
        title=cell(title), verdict="red" if red(results) else "green", about=about(results),
        baseline_line=baseline_line, failures=failures, drifts=drifts, mutation=mutation, worse=[m for m in marks if m.worse],
        rows=[row(c, by_case.get(c["id"], [])) for c in cases])
