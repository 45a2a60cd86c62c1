"""The results file a run writes through ``--spec-decode-results``, and the errors a bad one gets."""

from __future__ import annotations

import json

import pytest

from spec_decode_ci import results
from tests.report.conftest import DEMO_TESTS, run_with_results


def checks_by_name(data: dict) -> dict[str, dict]:
    return {c["test"].split("::")[-1]: c for case in data["cases"] for c in case["checks"]}


def test_each_test_ends_as_pytest_ended_it(demo_results):
    _, data = demo_results
    checks = checks_by_name(data)
    assert {name: c["outcome"] for name, c in checks.items()} == {
        "test_passes": "passed", "test_fails": "failed", "test_errors": "error", "test_skips": "skipped"}
    assert checks["test_fails"]["message"] == "AssertionError: acceptance | below the floor"
    assert checks["test_errors"]["message"] == "RuntimeError: the fixture broke"
    assert checks["test_skips"]["message"] == "needs a B200"
    assert checks["test_passes"]["message"] is None
    assert data["summary"] == {"failed": 1, "error": 1, "passed": 1, "skipped": 1}
    assert data["exit_status"] == 1


def test_figures_land_in_the_case_the_tests_name(demo_results):
    _, data = demo_results
    cases = {c["id"]: c for c in data["cases"]}
    assert set(cases) == {"eagle-tiny", "test_demo"}  # tests that name no case belong to their module
    eagle = cases["eagle-tiny"]
    assert eagle["runner"] == "V2" and data["runner"] == "V2"
    assert eagle["figures"] == {
        "acceptance_per_position": {"measured": [1.0, 0.5], "expected": [1.0, 0.5]},
        "host_sync_sites": {"eagle.py:10 in propose": 2}, "host_syncs_per_step_max": 0,
        "engine_start_s": {"speculative": 40.0, "baseline": 30.0}, "mixed_batches": 3}
    assert [c["test"].split("::")[-1] for c in eagle["checks"]] == ["test_passes", "test_fails"]


def test_the_step_and_device_come_from_the_agents_environment(tmp_path):
    env = {"BUILDKITE_STEP_KEY": "spec-decode-eagle-harness-nightly-b200", "BUILDKITE_BUILD_NUMBER": "4321",
           "BUILDKITE_BUILD_URL": "https://buildkite.example/b/4321", "SPEC_DECODE_CI_DEVICE": "b200",
           "SPEC_DECODE_CI_CAPABILITIES": "trtllm_decode,cuda"}
    status, data = run_with_results(tmp_path, "def test_ok():\n    pass\n", env=env)
    assert status == 0 and data["exit_status"] == 0
    assert data["step"]["key"] == "spec-decode-eagle-harness-nightly-b200" and data["step"]["build_number"] == 4321
    assert data["device"] == {"name": "b200", "capabilities": ["cuda", "trtllm_decode"]}


def test_xdist_workers_report_to_one_file(tmp_path):
    """Under ``-n 2`` the controller writes the one file, every worker's tests in it."""
    status, data = run_with_results(tmp_path, DEMO_TESTS, "-n", "2")
    assert status == 1
    assert {n: c["outcome"] for n, c in checks_by_name(data).items()} == {
        "test_passes": "passed", "test_fails": "failed", "test_errors": "error", "test_skips": "skipped"}
    assert data["cases"] and not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("edit, where, expected", [
    (lambda d: d.update(schema="pytest-json"), "schema", "expected 'spec-decode-ci/results'"),
    (lambda d: d.update(schema_version=results.SCHEMA_VERSION + 1), "schema_version", "upgrade spec-decode-ci"),
    (lambda d: d.pop("cases"), "cases", "expected a list of cases"),
    (lambda d: d["cases"][0]["checks"][0].update(outcome="xpassed"), "cases[0].checks[0].outcome",
     "expected one of failed, error, passed, skipped"),
    (lambda d: d["cases"][0]["figures"].update(acceptance_per_position=[0.5]),
     "cases[0].figures.acceptance_per_position", "expected an object with 'measured'"),
])
def test_a_bad_results_file_is_located(demo_results, tmp_path, edit, where, expected):
    _, data = demo_results
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(results.ResultsError) as info:
        results.load(path)
    assert info.value.where == f"{path}: {where}" and expected in info.value.expected


def test_a_file_that_is_not_json_names_its_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"schema":\n  }\n')
    with pytest.raises(results.ResultsError) as info:
        results.load(path)
    assert str(info.value).startswith(f"{path}:2:3: expected JSON")
