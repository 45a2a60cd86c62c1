"""The command-line contract: flags, exit codes, atomic writes, --check, determinism, no heavy imports."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.generator.conftest import REPO_ROOT

COMMITTED = REPO_ROOT / ".buildkite" / "test_areas" / "spec_decode.yaml"


def test_committed_test_area_file_is_current(cli):
    result = cli("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--output", str(COMMITTED), "--check")
    assert result.code == 0, result.out + result.err


def test_check_is_red_on_a_hand_edited_output(cli, tmp_path):
    output = tmp_path / "spec_decode.yaml"
    args = ["--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--output", str(output)]
    assert cli(*args).code == 0
    edited = output.read_text().replace("timeout_in_minutes: 30", "timeout_in_minutes: 45", 1)
    output.write_text(edited)
    result = cli(*args, "--check")
    assert result.code == 1
    assert "-    timeout_in_minutes: 45" in result.out and "+    timeout_in_minutes: 30" in result.out
    assert output.read_text() == edited, "--check must never write"


def test_check_without_committed_file_is_drift(cli, tmp_path):
    result = cli("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--output", str(tmp_path / "x.yaml"), "--check")
    assert result.code == 1 and not (tmp_path / "x.yaml").exists()


def test_default_paths_from_repo_root(cli, tmp_path, monkeypatch, tricky_matrix):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert cli().code == 0
    assert (tmp_path / ".buildkite" / "test_areas" / "spec_decode.yaml").read_text().startswith("# @generated")


def test_missing_matrix_is_bad_input(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli()
    assert result.code == 2 and "hardware_matrix.yaml: not found" in result.err


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda t: t.replace("timeout_in_minutes: 5", "timeout_in_minutes: x"), "timeout_in_minutes: expected an integer"),
        (lambda t: t + "\nextra: 1\n", "unknown key 'extra'"),
        (lambda t: t.encode("utf-8") + b"\xff", "expected UTF-8 text"),
        (lambda t: "a: [\n", "invalid YAML"),
        (lambda t: t.replace("[cpu, b200]", "[cpu, gb300]"), "unknown device 'gb300'"),
    ],
)
def test_bad_input_leaves_output_untouched(cli, tmp_path, tricky_matrix, mutate, fragment):
    output = tmp_path / "out.yaml"
    output.write_text("previous contents\n")
    bad = mutate(tricky_matrix.read_text(encoding="utf-8"))
    tricky_matrix.write_bytes(bad if isinstance(bad, bytes) else bad.encode("utf-8"))
    result = cli("--matrix", str(tricky_matrix), "--output", str(output))
    assert result.code == 2
    assert fragment in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert result.err.startswith(f"generate-pipeline: {tricky_matrix}:")
    assert output.read_text() == "previous contents\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hardware_matrix.yaml", "out.yaml"]  # no temp file left


def test_bad_flags_exit_2(cli):
    assert cli("--format", "gitlab").code == 2
    result = cli("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--only", "no-such-step", "--output", "-")
    assert result.code == 2 and "unknown step key 'no-such-step'" in result.err
    result = cli("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--output", "-", "--check")
    assert result.code == 2 and "'-' (stdout) has nothing committed" in result.err


@pytest.mark.parametrize("args, fragment", [
    (("--nightly",), "--nightly only changes the native pipeline"),
    (("--on-demand",), "--on-demand only changes the native pipeline"),
    (("--format", "test-area", "--nightly"), "--nightly only changes the native pipeline"),
    (("--list", "--check"), "--list prints and exits; it takes no --check"),
    (("--list", "--output", "x.yaml"), "--list prints and exits; it takes no --output"),
    (("--format", "buildkite", "--check"), "--check needs --output FILE with --format buildkite"),
])
def test_combinations_that_mean_nothing_are_refused(cli, tmp_path, args, fragment):
    """Flags that would be accepted and do nothing: exit 2, one line, nothing written."""
    result = cli("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), *args)
    assert result.code == 2 and fragment in result.err and result.err.count("\n") == 1, result
    assert "'-'" not in result.err
    assert not (tmp_path / "x.yaml").exists()


def test_write_keeps_the_existing_mode_else_honours_the_umask(cli, tmp_path):
    """mkstemp's 0600 must not reach the committed file."""
    output = tmp_path / "spec_decode.yaml"
    args = ("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--output", str(output))
    old = os.umask(0o022)
    try:
        assert cli(*args).code == 0
        assert output.stat().st_mode & 0o777 == 0o644
        output.chmod(0o664)
        assert cli(*args).code == 0
        assert output.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(old)


def test_output_does_not_depend_on_where_the_matrix_lives(cli, tmp_path):
    """An unchanged copy of the matrix under another name and directory checks clean against the committed file."""
    copy = tmp_path / "elsewhere" / "my-matrix.yml"
    copy.parent.mkdir()
    copy.write_bytes((REPO_ROOT / "hardware_matrix.yaml").read_bytes())
    result = cli("--matrix", str(copy), "--output", str(COMMITTED), "--check")
    assert result.code == 0, result.out + result.err


def test_only_and_on_demand(cli):
    key = "spec-decode-eagle-harness-nightly-b200"
    matrix = str(REPO_ROOT / "hardware_matrix.yaml")
    gated = cli("--matrix", matrix, "--format", "buildkite", "--only", key)
    assert gated.code == 0 and 'block: "Run :nvidia: (B200) Spec Decode Harness Eagle Nightly"' in gated.out
    assert gated.out.count("  - label:") == 1
    now = cli("--matrix", matrix, "--format", "buildkite", "--only", key, "--on-demand")
    assert now.code == 0 and "block:" not in now.out and f'key: "{key}"' in now.out


def _listed(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()[1:] if not line.startswith("    $ ")]


@pytest.mark.parametrize("how", [("--nightly",), ()])
def test_nightly_drops_gates(cli, how):
    environ = {} if how else {"NIGHTLY": "1"}
    matrix = str(REPO_ROOT / "hardware_matrix.yaml")
    result = cli("--matrix", matrix, "--format", "buildkite", *how, environ=environ)
    assert result.code == 0 and "block:" not in result.out and "spec-decode-eagle-harness-nightly-b200" in result.out
    gated = cli("--matrix", matrix, "--format", "buildkite")
    listed = _listed(cli("--matrix", matrix, "--format", "buildkite", "--list").out)
    optional_steps = [row for row in listed if row[4] == "yes"]
    assert len(optional_steps) >= 3 and gated.out.count("  - block:") == len(optional_steps)


def test_list_shows_device_string_routed_queue_and_commands(cli):
    result = cli("--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--list")
    lines = result.out.splitlines()
    assert lines[0].split() == ["KEY", "DEVICE", "QUEUE", "IMAGE", "OPTIONAL", "TIMEOUT", "LABEL"]
    rows = {row[0]: row for row in _listed(result.out)}
    assert rows["spec-decode-eagle-harness-nightly-b200"][1:6] == ["b200-k8s", "b200-k8s", "image-build", "yes", "30m"]
    assert rows["spec-decode-build-path-harness-h200-18gb"][1:5] == ["h200_18gb", "h200_18gb", "image-build", "no"]
    assert rows["spec-decode-tiny-smoke-harness-nightly-h200"][1:3] == ["h200", "H200"]
    assert rows["speculators-correctness"][1:3] == ["h100", "mithril-h100-pool"]
    after = lines[lines.index(next(l for l in lines if l.startswith("spec-decode-eagle-harness-nightly-b200"))) + 2]
    assert after.startswith("    $ python -m pytest -p spec_decode_ci.pytest_plugin") and "test_eagle" in after


def _generate_in_subprocess(seed: str, *args: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-m", "spec_decode_ci.generator", "--matrix", str(REPO_ROOT / "hardware_matrix.yaml"), "--output", "-",
         *args], check=True, capture_output=True, env=env, cwd=REPO_ROOT,
    ).stdout


@pytest.mark.parametrize("fmt", ["test-area", "buildkite"])
def test_byte_identical_across_hash_seeds(fmt):
    outputs = {_generate_in_subprocess(seed, "--format", fmt) for seed in ("0", "1", "12345")}
    assert len(outputs) == 1


def test_generator_does_not_import_torch_or_vllm():
    code = (
        "import sys; from spec_decode_ci.generator.cli import main; "
        f"main(['--matrix', {str(REPO_ROOT / 'hardware_matrix.yaml')!r}, '--output', {str(COMMITTED)!r}, '--check']); "
        "print(sorted(m for m in ('torch', 'vllm', 'jsonschema') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"
