"""``spec-decode-ci report``: the annotation it hands ``buildkite-agent`` (a stand-in on PATH records it), what it
prints without one, the baseline build it fetches, the trend it draws, and its errors."""

from __future__ import annotations

import json

import pytest

from tests.report.conftest import report


def annotations(agent) -> list[dict]:
    return [c for c in agent.calls() if c["args"][0] == "annotate"]


def test_without_the_agent_it_prints_the_markdown(demo_results):
    path, _ = demo_results
    proc = report(str(path))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("### spec-decode-ci: red\n")
    failures = text.index("**Failures**")
    table = text.index("| Case |")
    assert failures < table  # failures first
    assert "- ❌ `test_demo.py::test_fails`: AssertionError: acceptance \\| below the floor" in text
    assert "- 💥 `test_demo.py::test_errors`: RuntimeError: the fixture broke" in text
    rows = [line for line in text[table:].splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 2 and rows[0].startswith("| ❌ eagle-tiny | V2 | ❌ 1 ✅ 1 | 1.00 0.50 (expected 1.00 0.50)")
    assert rows[1].startswith("| 💥 test_demo | – | 💥 1 ⏭️ 1 |")
    assert "No baseline: none given" in text


def test_on_an_agent_it_annotates_with_the_steps_context_and_style(demo_results, agent):
    path, _ = demo_results
    proc = report(str(path), "--context", "spec-decode-eagle-harness-nightly-b200", env=agent.env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    (call,) = annotations(agent)
    assert call["args"] == ["annotate", "--context", "spec-decode-eagle-harness-nightly-b200", "--style", "error"]
    assert call["stdin"].startswith("### spec-decode-ci: red") and "test_fails" in call["stdin"]


def test_a_green_run_is_a_success_and_a_worse_figure_a_warning(tmp_path, demo_results, agent):
    path, data = demo_results
    for case in data["cases"]:
        case["checks"] = [dict(c, outcome="passed", message=None) for c in case["checks"]]
    data.update(exit_status=0, summary={"failed": 0, "error": 0, "passed": 4, "skipped": 0})
    green = tmp_path / "green.json"
    green.write_text(json.dumps(data))
    assert report(str(green), env=agent.env).returncode == 0
    worse = json.loads(json.dumps(data))
    worse["cases"][0]["figures"]["acceptance_per_position"]["measured"] = [1.0, 0.3]
    lower = tmp_path / "lower.json"
    lower.write_text(json.dumps(worse))
    assert report(str(lower), "--baseline", str(green), env=agent.env).returncode == 0
    styles = [c["args"][c["args"].index("--style") + 1] for c in annotations(agent)]
    assert styles == ["success", "warning"]
    body = annotations(agent)[1]["stdin"]
    assert "⚠️ eagle-tiny, acceptance_per_position: position 1: 0.300, baseline 0.500" in body
    assert "Compared with build" not in body and "Compared with the baseline" in body


def test_a_nightly_fetches_the_named_builds_results(demo_results, agent):
    path, data = demo_results
    before = json.loads(json.dumps(data))
    before["cases"][0]["figures"]["host_sync_sites"] = {}
    before["step"]["build_number"] = 41
    agent.holds("0190-build-41", "results.json", before)
    proc = report("results.json", "--baseline-build", "0190-build-41", env=agent.env, cwd=path.parent)
    assert proc.returncode == 0, proc.stderr
    download = next(c for c in agent.calls() if c["args"][:2] == ["artifact", "download"])
    assert download["args"][2] == "results.json" and download["args"][-2:] == ["--build", "0190-build-41"]
    body = annotations(agent)[0]["stdin"]
    assert "Compared with build 41" in body
    assert "new sync site eagle.py:10 in propose (x2)" in body


@pytest.mark.parametrize("build, says", [
    ("", "No baseline: the pipeline named no earlier build ($SPEC_DECODE_CI_BASELINE_BUILD is empty)."),
    ("0190-build-40", "No baseline: build 0190-build-40 has no results.json (fatal: failed to download artifacts"),
])
def test_no_baseline_is_said_in_the_annotation(demo_results, agent, build, says):
    path, _ = demo_results
    proc = report("results.json", "--baseline-build", build, env=agent.env, cwd=path.parent)
    assert proc.returncode == 0, proc.stderr
    assert says in annotations(agent)[0]["stdin"]


@pytest.mark.parametrize("content, says", [
    ('{"schema": "spec-decode-ci/results",\n "schema_version": 1,,}', "bad.json:2:22: expected JSON"),
    ('{"schema": "spec-decode-ci/results", "schema_version": 9}',
     "bad.json: schema_version: version 9 is newer than this spec-decode-ci reads (up to 1); upgrade spec-decode-ci"),
    ('[]', "bad.json: expected a JSON object"),
])
def test_a_bad_results_file_is_one_located_line_and_exit_2(tmp_path, content, says):
    (tmp_path / "bad.json").write_text(content)
    proc = report("bad.json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("spec-decode-ci report: error: ") and says in proc.stderr


def test_a_folder_without_results_is_an_error(tmp_path):
    proc = report(str(tmp_path))
    assert proc.returncode == 2 and "expected results files (*.json), found none" in proc.stderr


def test_history_draws_the_trend_as_a_png(tmp_path, demo_results):
    from spec_decode_ci.report.history import series

    path, data = demo_results
    runs = tmp_path / "nightlies"
    for number, rate in ((40, 0.7), (41, 0.6), (42, 0.5)):
        night = json.loads(json.dumps(data))
        night["step"]["build_number"], night["finished_at"] = number, f"2026-12-0{number - 39}T03:00:00+00:00"
        night["cases"][0]["figures"]["acceptance_per_position"]["measured"] = [1.0, rate]
        night["cases"][0]["figures"]["speed"] = {"speedup": 2 * rate}
        (runs / str(number)).mkdir(parents=True)
        (runs / str(number) / "results.json").write_text(json.dumps(night))
    proc = report("--history", str(runs), "--output", str(tmp_path / "trend.png"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "trend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from spec_decode_ci import results

    labels, acceptance, start, speedup = series(results.load_all([runs]))
    assert labels == ["40", "41", "42"]
    assert acceptance["eagle-tiny"] == {0: [1.0, 1.0, 1.0], 1: [0.7, 0.6, 0.5]}
    assert start["eagle-tiny (speculative)"] == [40.0, 40.0, 40.0]
    assert speedup["eagle-tiny"] == [1.4, 1.2, 1.0]


def test_history_needs_an_output(tmp_path, demo_results):
    proc = report("--history", str(demo_results[0].parent))
    assert proc.returncode == 2 and "--history: expected --output PATH" in proc.stderr
