"""Stage 3: step keys and labels follow vLLM's conventions; keys Buildkite would refuse are bad input."""

from __future__ import annotations

import pytest

from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.expand import buildkite_key_problem, expand, select
from spec_decode_ci.generator.load import parse_text
from spec_decode_ci.generator.model import parse_matrix


def steps_of(text: str):
    doc = parse_text(text, "hardware_matrix.yaml")
    return expand(parse_matrix(doc), doc.error)


def test_harness_steps_sit_beside_vllms_under_keys_of_their_own(repo_matrix_text):
    by_key = {s.key: s for s in steps_of(repo_matrix_text)}
    expected = {
        "spec-decode-eagle-harness-nightly-b200": ":nvidia: (B200) Spec Decode Harness Eagle Nightly",
        "spec-decode-speculators-mtp-harness-nightly-b200": ":nvidia: (B200) Spec Decode Harness Speculators + MTP Nightly",
        "spec-decode-draft-model-harness-nightly-b200": ":nvidia: (B200) Spec Decode Harness Draft Model Nightly",
    }
    for key, label in expected.items():
        assert by_key[key].label == label
        assert by_key[key].device.test_area_device == "b200-k8s"
    for vllm_key in ("spec-decode-eagle-nightly-b200", "spec-decode-speculators-mtp-nightly-b200",
                     "spec-decode-draft-model-nightly-b200"):
        assert by_key[vllm_key].suite is None  # vLLM's own step, as vLLM writes it


def test_vllm_steps_keep_matrix_order_and_suite_steps_are_sorted_by_label(repo_matrix_text):
    steps = steps_of(repo_matrix_text)
    suite_labels = [s.label for s in steps if s.suite]
    assert suite_labels == sorted(suite_labels)
    assert all(s.suite is None for s in steps[: len(steps) - len(suite_labels)])


def test_compat_lane_is_a_step_per_release_compat_names(repo_matrix_text):
    """`vllm: compat_lane` gives one native-pipeline step per release of spec_decode_ci.compat, each installing
    that release before the tier runs; the test-area file (vLLM's CI, its own vLLM) carries none of them."""
    from spec_decode_ci.compat import NEWEST, OLDEST, compat_lane_releases

    doc = parse_text(repo_matrix_text, "hardware_matrix.yaml")
    native = expand(parse_matrix(doc), doc.error, pipeline="buildkite")
    lane = {s.vllm: s for s in native if s.vllm and s.vllm != "nightly"}
    assert tuple(sorted(lane, key=lambda r: tuple(map(int, r.split("."))))) == compat_lane_releases()
    assert {OLDEST, NEWEST} <= set(lane)
    for release, step in lane.items():
        assert step.key == f"spec-decode-build-path-harness-vllm-{release.replace('.', '-')}-h200-18gb"
        assert step.label.endswith(f"on vLLM {release}") and step.device.name == "h200_18gb"
        assert step.commands[1] == f"python -m spec_decode_ci.install_vllm {release}"
    assert not any(s.vllm for s in expand(parse_matrix(doc), doc.error))


def test_vllm_main_runs_nightly_from_the_nightly_wheel_without_gating(repo_matrix_text):
    doc = parse_text(repo_matrix_text, "hardware_matrix.yaml")
    (step,) = [s for s in expand(parse_matrix(doc), doc.error, pipeline="buildkite") if s.vllm == "nightly"]
    assert step.optional and step.get("soft_fail") and step.suite.schedule == "nightly"
    assert step.commands[1] == "python -m spec_decode_ci.install_vllm nightly --index-url https://wheels.vllm.ai/nightly"
    assert "nightly" in step.key and "vLLM main" in step.label


def test_a_list_of_releases_gives_a_step_each(tricky_matrix):
    text = tricky_matrix.read_text().replace("    schedule: every_change\n",
                                             "    schedule: every_change\n    vllm: ['0.20.0', '0.33.0']\n", 1)
    keys = [s.key for s in steps_of(text) if s.suite and s.suite.name == "quoting"]
    assert "quoting-vllm-0-20-0-cpu" in keys and "quoting-vllm-0-33-0-cpu" in keys


def test_pytest_command_names_plugin_suite_marker_junit_and_results(tricky_matrix):
    step = next(s for s in steps_of(tricky_matrix.read_text()) if s.key == "quoting-cpu")
    assert step.run_command == (
        "python -m pytest -p spec_decode_ci.pytest_plugin -v -rs -m 'not slow and e2e' --pyargs "
        "spec_decode_ci.suites.x --junitxml=junit/quoting-cpu.xml "
        "--spec-decode-results=spec-decode-results/quoting-cpu.json"
    )
    assert step.commands == (
        "python -m pip install --quiet spec-decode-ci==9.9.9",
        step.run_command + " && status=0 || status=$$?; "
        "spec-decode-ci report spec-decode-results/quoting-cpu.json --context quoting-cpu || true; "
        "buildkite-agent artifact upload 'junit/quoting-cpu.xml;spec-decode-results/quoting-cpu.json' || true; "
        "exit $$status",
    )


def test_a_nightly_step_reports_against_the_build_the_pipeline_names(repo_matrix_text):
    eagle = next(s for s in steps_of(repo_matrix_text) if s.key == "spec-decode-eagle-harness-nightly-b200")
    assert ' --baseline-build "$${SPEC_DECODE_CI_BASELINE_BUILD:-}" || true;' in eagle.commands[-1]
    per_change = next(s for s in steps_of(repo_matrix_text) if s.key == "spec-decode-build-path-harness-h200-18gb")
    assert "--baseline-build" not in per_change.commands[-1]


@pytest.mark.parametrize("join", ["lines", "and"])
@pytest.mark.parametrize("tests, after, status, ran", [
    ("exit 3", ["echo report", "echo upload"], 3, "report upload"),
    ("true", ["echo report", "false", "echo upload"], 0, "report upload"),
    ("false", ["no-such-command-here", "echo upload"], 1, "upload"),
])
def test_the_step_keeps_the_tests_status_and_runs_what_follows(tests, after, status, ran, join):
    """Under `bash -e` (a Buildkite agent) and with the commands joined by `&&` (ci-infra), the report and the
    upload run whatever the tests did, cannot fail the step, and the step exits with the tests' status."""
    import subprocess

    from spec_decode_ci.generator.expand import keep_status

    command = keep_status(f"(echo tests; {tests})", after).replace("$$", "$")  # as Buildkite hands it the shell
    script = f"echo install\n{command}" if join == "lines" else f"echo install && {command}"
    proc = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True)
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.split() == ["install", "tests", *ran.split()]


def test_a_suite_key_that_takes_a_step_key_is_located(tricky_matrix):
    text = tricky_matrix.read_text().replace("  key: own-step\n", "  key: quoting-cpu\n")
    with pytest.raises(InputError) as info:
        steps_of(text)
    assert "duplicate step key 'quoting-cpu' (also used by step 1)" in str(info.value)
    assert info.value.path == "suites.quoting.key"


def test_duplicate_step_keys_are_located(tricky_matrix):
    text = tricky_matrix.read_text().replace("    key: nightly\n", "    key: quoting\n").replace(
        "    schedule: nightly\n", "    schedule: every_change\n"
    )
    with pytest.raises(InputError) as info:
        steps_of(text)
    assert "duplicate step key 'quoting-b200' (also used by suite 'quoting')" in str(info.value)
    assert info.value.path == "suites.nightly.key"


def test_overlong_key_is_refused(tricky_matrix):
    text = tricky_matrix.read_text().replace("    key: nightly\n", f"    key: {'k' * 90}\n")
    with pytest.raises(InputError, match="Buildkite allows at most 100"):
        steps_of(text)


@pytest.mark.parametrize(
    "key, problem",
    [
        ("ok-key_1:x.y,z${A}", None),
        ("has space", "characters outside"),
        ("k" * 101, "at most 100"),
        ("123e4567-e89b-12d3-a456-426614174000", "looks like a UUID"),
    ],
)
def test_buildkite_key_rules(key, problem):
    found = buildkite_key_problem(key)
    assert (found is None) if problem is None else (problem in found)


def test_uuid_shaped_step_key_is_refused(tricky_matrix):
    text = (
        tricky_matrix.read_text()
        .replace("  b200:\n", "  abcdef012345:\n")
        .replace("[cpu, b200]", "[cpu, abcdef012345]").replace("device: b200-k8s", "device: abcdef012345")
        .replace("    devices: [b200]\n", "    devices: [abcdef012345]\n")
        .replace("    key: quoting\n", "    key: 123e4567-e89b-12d3-a456\n")
    )
    with pytest.raises(InputError, match="looks like a UUID") as info:
        steps_of(text)
    assert info.value.path == "suites.quoting.key"


def test_select_keeps_order_and_refuses_unknown_keys(repo_matrix_text):
    steps = steps_of(repo_matrix_text)
    keys = [s.key for s in steps]
    chosen = select(steps, [keys[3], keys[1]], lambda p, m: InputError("command line", m, path=p))
    assert [s.key for s in chosen] == [keys[1], keys[3]]
    with pytest.raises(InputError, match="unknown step key 'nope'"):
        select(steps, ["nope"], lambda p, m: InputError("command line", m, path=p))
