"""Every suite marker is run by a step of the committed matrix: tests moved to a marker no step selects would
leave CI without a word."""

from __future__ import annotations

import pytest

from spec_decode_ci.generator.model import load_matrix
from spec_decode_ci.pytest_plugin import MARKERS, selects
from tests.generator.conftest import REPO_ROOT

# Markers whose tests no suite step runs, and where they run instead.
RUN_ELSEWHERE = {"packaging": "the built wheel's check beside a decoy vLLM tests tree: README's test command"}
MATRIX = load_matrix(REPO_ROOT / "hardware_matrix.yaml")


def steps_running(marker: str) -> list[str]:
    return sorted(name for name, suite in MATRIX.suites.items() if selects(suite.markers, marker))


@pytest.mark.parametrize("marker", sorted(set(MARKERS) - set(RUN_ELSEWHERE)))
def test_every_suite_marker_is_run_by_a_step(marker):
    assert steps_running(marker), f"no suite of hardware_matrix.yaml selects marker {marker!r}"


def test_the_per_change_step_runs_the_changes_verdicts_and_not_the_harness_checks():
    """The per-change step runs the build path, the sentinel and the offline e2e configs; the self-check and the
    harness's checks of itself run in the lanes that check the harness."""
    per_change = MATRIX.suites["build_path"].markers
    assert [m for m in ("build_path", "sentinel", "e2e_offline") if not selects(per_change, m)] == []
    assert [m for m in ("selfcheck", "harness") if selects(per_change, m)] == []
    assert "build_path_compat" in steps_running("harness") and "build_path_vllm_main" in steps_running("selfcheck")


def test_a_marker_no_step_selects_is_seen():
    assert not selects("build_path or sentinel", "harness") and selects("build_path or harness", "harness")
