"""The report of a real CPU run of the build-path tier against vLLM's FlashInfer builder with PR #39546's guard
undone (the self-check's ``old_guard``): the results file names the red cases, the annotation lists them first."""

from __future__ import annotations

import pytest

from spec_decode_ci import results
from spec_decode_ci.pytest_run import regression_args
from spec_decode_ci.patches import REGRESSIONS
from spec_decode_ci.pytest_run import run_pytest
from tests.report.conftest import report

TIER_MODULE = "spec_decode_ci.suites.test_guard_truth_table"


@pytest.mark.selfcheck
def test_a_red_tier_run_reports_its_red_cases_first(tmp_path, agent):
    path = tmp_path / "results.json"
    run = run_pytest(TIER_MODULE, marker="build_path", extra=(*regression_args("old_guard"),
                                                              f"--spec-decode-results={path}"))
    assert run.returncode == 1, run.tail()
    data = results.load(path)
    (case,) = data["cases"]
    assert case["id"] == "test_guard_truth_table"
    red = {c["test"].split("::")[-1] for c in case["checks"] if c["outcome"] == "failed"}
    assert red == run.red and red >= set(REGRESSIONS["old_guard"].must_fail)
    assert data["summary"]["passed"] >= 1  # the rows the old guard gets right stay green
    assert data["vllm"]["version"] and data["exit_status"] == 1

    proc = report(str(path), "--context", "build-path", env=agent.env)
    assert proc.returncode == 0, proc.stderr
    (call,) = [c for c in agent.calls() if c["args"][0] == "annotate"]
    assert call["args"][-2:] == ["--style", "error"]
    body = call["stdin"]
    failures = body[body.index("**Failures**"):body.index("| Case |")]
    assert sorted(line.split("`")[1].split("::")[-1] for line in failures.splitlines() if line.startswith("- ")) \
        == sorted(red)
    assert f"| ❌ test_guard_truth_table | – | ❌ {len(red)} ✅ {data['summary']['passed']} |" in body
