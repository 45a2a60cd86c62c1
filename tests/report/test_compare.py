"""What the report marks against a baseline run and against a case's prediction."""

from __future__ import annotations

import copy

import pytest

from spec_decode_ci.report.compare import baseline_for, compare


def run(key="spec-decode-eagle-harness-nightly-b200", finished="2026-12-05T03:00:00+00:00", **figures) -> dict:
    base = {"acceptance_per_position": {"measured": [0.9, 0.6, 0.3], "expected": None}, "acceptance_length": 2.8,
            "host_sync_sites": {"eagle.py:10 in propose": 4}, "host_syncs_per_step_max": 0,
            "engine_start_s": {"speculative": 60.0, "baseline": 40.0}}
    base.update(figures)
    return {"step": {"key": key, "build_number": 7}, "finished_at": finished, "vllm": {"version": "0.34.0"},
            "cases": [{"id": "eagle3-llama", "runner": "V2", "figures": base,
                       "checks": [{"test": "t::test_acceptance", "outcome": "passed", "message": None}]}]}


def marks(now: dict, before: dict | None, **options) -> list[tuple[str, str, bool]]:
    return [(m.figure, m.text, m.worse) for m in compare(now, before, **options)]


def test_an_unchanged_run_has_no_marks():
    assert marks(run(), run()) == []


def test_acceptance_per_position_moves_beyond_the_tolerance_only():
    lower = run(acceptance_per_position={"measured": [0.9, 0.52, 0.33], "expected": None})
    assert marks(lower, run()) == [("acceptance_per_position", "position 1: 0.520, baseline 0.600", True)]
    assert marks(lower, run(), tolerance=0.1) == []
    higher = run(acceptance_per_position={"measured": [0.97, 0.6, 0.3], "expected": None})
    assert marks(higher, run()) == [("acceptance_per_position", "position 0: 0.970, baseline 0.900", False)]


def test_a_drop_that_stays_above_any_floor_is_still_marked():
    """The drop vLLM's EAGLE-3 acceptance took unnoticed: every position lower, the mean still above a floor."""
    dropped = run(acceptance_per_position={"measured": [0.8, 0.45, 0.2], "expected": None}, acceptance_length=2.45)
    worse = [m for m in marks(dropped, run()) if m[2]]
    assert [m[0] for m in worse] == ["acceptance_per_position"] * 3 + ["acceptance_length"]


def test_measured_against_expected_per_position():
    off = run(acceptance_per_position={"measured": [0.9, 0.4, 0.3], "expected": [0.9, 0.6, 0.3]})
    assert marks(off, None) == [("acceptance_per_position", "position 1: 0.400, expected 0.600", True)]


def test_a_new_sync_site_and_more_syncs_per_step_are_worse():
    now = run(host_sync_sites={"eagle.py:10 in propose": 4, "speculator.py:88 in propose": 16},
              host_syncs_per_step_max=1)
    assert marks(now, run()) == [
        ("host_sync_sites", "new sync site speculator.py:88 in propose (x16)", True),
        ("host_syncs_per_step_max", "1 per step, baseline 0", True)]


def test_engine_start_beyond_the_ratio():
    slow = run(engine_start_s={"speculative": 100.0, "baseline": 40.0})
    assert marks(slow, run()) == [("engine_start_s", "speculative engine start 100.0 s, baseline 60.0 s (over 1.5x)",
                                   True)]
    assert marks(slow, run(), start_ratio=2.0) == []


def test_a_check_newly_red_and_a_case_gone():
    now = run()
    now["cases"][0]["checks"][0]["outcome"] = "failed"
    assert marks(now, run()) == [("check", "t::test_acceptance: failed (baseline passed)", True)]
    before = run()
    before["cases"].append({"id": "mtp-tiny", "figures": {}, "checks": []})
    assert marks(run(), before) == [("case", "gone: in the baseline, not in this run", True)]


def test_the_baseline_is_the_latest_run_of_the_same_step():
    older, newer = run(finished="2026-12-01T00:00:00+00:00"), run(finished="2026-12-04T00:00:00+00:00")
    other_step = run(key="spec-decode-mtp-harness-nightly-b200", finished="2026-12-05T00:00:00+00:00")
    assert baseline_for(run(), [older, other_step, newer]) is newer
    assert baseline_for(run(), [other_step]) is None
    unnamed = copy.deepcopy(run(key=None))
    assert baseline_for(unnamed, [run(key=None)]) is not None  # off CI: the one baseline given


@pytest.mark.parametrize("figure", ["acceptance_per_position", "host_sync_sites", "engine_start_s"])
def test_a_figure_missing_on_either_side_is_not_compared(figure):
    now = run()
    del now["cases"][0]["figures"][figure]
    assert marks(now, run()) == []


def mutation_figure(rate: float, run_count: int = 192, survivors=()) -> dict:
    return {"backend": "flashinfer", "generated": 192, "run": run_count, "killed": 150, "equivalent": 10,
            "rate": rate, "goal": 0.95, "missing_functions": [], "survivors": list(survivors),
            "stale_equivalents": [], "errors": []}


def test_a_mutation_score_that_fell_over_the_same_draw_is_marked():
    """A lower kill rate over as many mutants of as many generated is worse; a different draw is not compared."""
    assert marks(run(mutation_score=mutation_figure(0.90)), run(mutation_score=mutation_figure(0.95))) == [
        ("mutation_score", "90.0% of the non-equivalent mutants killed, baseline 95.0%", True)]
    assert marks(run(mutation_score=mutation_figure(0.97)), run(mutation_score=mutation_figure(0.95))) == []
    assert marks(run(mutation_score=mutation_figure(0.90, 20)), run(mutation_score=mutation_figure(0.95))) == []


def test_the_annotation_lists_each_backends_score_and_survivors():
    from spec_decode_ci.report.markdown import render

    now = run(mutation_score=mutation_figure(0.9, survivors=["flashinfer.py:1592 [compare] a >= 128 -> a > 128"]))
    now.update(exit_status=1, summary={"failed": 1}, device={"name": "h200_18gb"}, runner=None)
    now["step"]["label"] = "mutants"
    text = render(now, [], "no baseline")
    assert "flashinfer: 90.0% of the non-equivalent mutants killed (goal 95%): 192 of 192 run" in text, text
    assert "survived: `flashinfer.py:1592 [compare] a >= 128 -> a > 128`" in text, text


def speed_figure(speedup: float, spec_tps: float, floor=None) -> dict:
    return {"speedup": speedup, "floor": floor, "command": "python -m spec_decode_ci.e2e.speed ...",
            "speculative": {"tokens_per_s": spec_tps, "gpu_idle_share": 0.12},
            "target": {"tokens_per_s": round(spec_tps / speedup, 1), "gpu_idle_share": 0.3}}


def test_speed_that_fell_beyond_the_tolerance_is_marked():
    """A speedup, or the speculative engine's tokens/s, more than the tolerance below the baseline's is worse;
    within it, or faster, is not marked."""
    before = run(speed=speed_figure(2.0, 600.0))
    assert marks(run(speed=speed_figure(1.7, 600.0)), before) == [
        ("speed", "speedup 1.7x, baseline 2x (-15%, tolerance 10%)", True)]
    assert marks(run(speed=speed_figure(2.0, 500.0)), before) == [
        ("speed", "speculative tokens/s 500 tokens/s, baseline 600 tokens/s (-17%, tolerance 10%)", True)]
    assert marks(run(speed=speed_figure(1.85, 560.0)), before) == []
    assert marks(run(speed=speed_figure(1.7, 600.0)), before, speed_tolerance=0.2) == []
    assert marks(run(speed=speed_figure(2.4, 700.0)), before) == []


def test_the_annotation_shows_the_speedup_with_both_engines():
    from spec_decode_ci.report.markdown import render

    now = run(speed=speed_figure(1.5, 450.0, floor=1.2))
    now.update(exit_status=0, summary={"passed": 1}, device={"name": "h100"}, runner="V2")
    worse = compare(now, run(speed=speed_figure(2.0, 600.0)))
    text = render(now, worse, "compared")
    assert "1.50x (≥ 1.2x): 450.0 vs 300.0 tok/s, GPU idle 12% vs 30%" in text, text
    assert "⚠️ eagle3-llama, speed: speedup 1.5x, baseline 2x" in text, text
