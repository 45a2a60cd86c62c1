"""`generate-pipeline import`: real vLLM test-area files become matrices that regenerate them with the same
meaning; a key ci-infra would drop is an error that names it."""

from __future__ import annotations

import pytest
import yaml

from tests.generator.ci_infra_meaning import effective_steps
from tests.generator.conftest import DATA

ROUND_TRIP = ["spec_decode.yaml", "samplers.yaml", "torch_abi.yaml", "rlhf.yaml", "rl.yaml", "jit_monitor.yaml",
              "ray_compat.yaml"]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_import_then_generate_round_trips(cli, tmp_path, name):
    source = DATA / "vllm" / name
    matrix = tmp_path / "matrix.yaml"
    imported = cli("import", str(source), "--output", str(matrix))
    assert imported.code == 0, imported.err
    regenerated = tmp_path / name
    result = cli("--matrix", str(matrix), "--format", "test-area", "--output", str(regenerated))
    assert result.code == 0, result.err
    original, again = (yaml.safe_load(p.read_text(encoding="utf-8")) for p in (source, regenerated))
    path = f".buildkite/test_areas/{name}"
    assert effective_steps(again, path) == effective_steps(original, path)
    assert again == original  # nothing but comments and layout may change


def test_import_writes_to_stdout_by_default(cli):
    result = cli("import", str(DATA / "vllm" / "torch_abi.yaml"))
    assert result.code == 0 and yaml.safe_load(result.out)["steps"][0]["key"] == "torch-stable-abi-audit"


@pytest.mark.parametrize("name, fragment", [
    ("tool_use.yaml", "tool_use.yaml:7:3: steps.0.mirror_hardwares: unknown key 'mirror_hardwares' in step 1"),
    ("weight_loading.yaml", "weight_loading.yaml:8:3: steps.0.num_gpus: unknown key 'num_gpus' in step 1 "
                            "(did you mean 'num_devices'?)"),
])
def test_a_key_ci_infra_drops_is_named_not_dropped(cli, tmp_path, name, fragment):
    output = tmp_path / "matrix.yaml"
    result = cli("import", str(DATA / "vllm" / name), "--output", str(output))
    assert result.code == 2 and fragment in result.err and result.err.count("\n") == 1
    assert not output.exists()


def test_import_of_a_missing_file_is_bad_input(cli, tmp_path):
    result = cli("import", str(tmp_path / "nope.yaml"))
    assert result.code == 2 and "cannot read file" in result.err
