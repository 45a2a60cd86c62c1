"""`generate-pipeline upstream`: vLLM's own test-area file against the matrix's copy of its steps, per step kept,
changed (the keys named), added or removed; what it says to copy makes the matrix follow vLLM again. The keys
accepted are ci-infra's, one traced row each; `automatic_shard` follows ci-infra's rule for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from spec_decode_ci.generator import ci_infra_keys, validate
from spec_decode_ci.report import markdown
from spec_decode_ci.results import VLLM_AREA_DRIFT
from tests.generator.conftest import DATA, REPO_ROOT

NEWEST = DATA / "vllm" / "spec_decode.yaml"  # vLLM's newest spec_decode.yaml (SOURCES.md)
MATRIX = REPO_ROOT / "hardware_matrix.yaml"


def _edited(tmp_path: Path) -> Path:
    """vLLM's newest file with one step's key changed (timeout), a mirror's device and a source path changed in
    others, one step removed and one added."""
    data = yaml.safe_load(NEWEST.read_text(encoding="utf-8"))
    steps = data["steps"]
    by_key = {s["key"]: s for s in steps}
    by_key["spec-decode-ngram-suffix"]["timeout_in_minutes"] = 99
    by_key["spec-decode-mtp-gemma4"]["mirror"]["amd"]["device"] = "mi355_1"
    by_key["spec-decode-mtp-deepseek-mimo"]["source_file_dependencies"].append("vllm/model_executor/models/mimo.py")
    steps.remove(by_key["speculators-correctness"])
    steps.append({"label": ":nvidia: (H200 MIG 35GB) Spec Decode DFlash3", "key": "spec-decode-dflash3",
                  "device": "h200_35gb", "timeout_in_minutes": 30, "commands": ["pytest -v -s v1/e2e/dflash3/"]})
    path = tmp_path / "spec_decode.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_newest_vllm_file_is_followed(cli):
    result = cli("upstream", str(NEWEST), "--matrix", str(MATRIX))
    assert result.code == 0, result.out + result.err
    assert "18 kept, 0 changed, 0 added, 0 removed" in result.out


def test_the_generated_file_is_vllms_steps_plus_the_harness_own(cli):
    """The generated file, put in vLLM's place, says the same for vLLM's steps; the harness's are not compared."""
    result = cli("upstream", str(REPO_ROOT / ".buildkite" / "test_areas" / "spec_decode.yaml"), "--matrix", str(MATRIX))
    assert result.code == 0, result.out + result.err
    assert re.search(r"18 kept, 0 changed, 0 added, 0 removed; \d+ of the harness's own steps not compared", result.out)


def test_a_changed_removed_and_added_step_are_reported_exactly(cli, tmp_path):
    result = cli("upstream", str(_edited(tmp_path)), "--matrix", str(MATRIX))
    assert result.code == 1, result.err
    lines = [line.strip() for line in result.out.splitlines()]
    assert [line for line in lines if line.split(" ")[0] in {"changed", "added", "removed", "file"}] == [
        "changed  spec-decode-mtp-gemma4: mirror.amd.device ('mi300_1' in the matrix, 'mi355_1' in vLLM's file)",
        "changed  spec-decode-mtp-deepseek-mimo: source_file_dependencies (+ vllm/model_executor/models/mimo.py)",
        "changed  spec-decode-ngram-suffix: timeout_in_minutes (20 in the matrix, 99 in vLLM's file)",
        "added    spec-decode-dflash3 (in vLLM's file, not in the matrix)",
        "removed  speculators-correctness (in the matrix, not in vLLM's file)",
    ]
    assert "14 kept, 3 changed, 1 added, 1 removed" in result.out


def test_what_it_says_to_copy_makes_the_matrix_follow_vllm(cli, tmp_path):
    """The steps printed under 'put these in the matrix', pasted in (and the removed one dropped), leave no drift."""
    edited = _edited(tmp_path)
    out = cli("upstream", str(edited), "--matrix", str(MATRIX)).out
    copied = yaml.safe_load(out.split("replacing the steps of the same key):\n", 1)[1].split("\nand drop", 1)[0])
    matrix = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    by_key = {s["key"]: s for s in copied}
    steps = [by_key.pop(s["key"], s) for s in matrix["steps"] if s["key"] != "speculators-correctness"]
    matrix["steps"] = steps + list(by_key.values())
    followed = tmp_path / "hardware_matrix.yaml"
    followed.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    result = cli("upstream", str(edited), "--matrix", str(followed))
    assert result.code == 0, result.out + result.err


def test_a_key_ci_infra_drops_in_vllms_file_is_located(cli, tmp_path):
    data = yaml.safe_load(NEWEST.read_text(encoding="utf-8"))
    data["steps"][2]["torch_nightly"] = True
    path = tmp_path / "spec_decode.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = cli("upstream", str(path), "--matrix", str(MATRIX))
    assert result.code == 2 and "steps.2.torch_nightly: unknown key 'torch_nightly' in step 3" in result.err
    assert result.err.count("\n") == 1


@pytest.mark.parametrize("device", ["b200-k8s", "h100"])
def test_automatic_shard_on_a_kubernetes_device_is_a_located_error(cli, tmp_path, device):
    """ci-infra refuses `automatic_shard` on the devices it runs through its Kubernetes plugin; so does import."""
    data = yaml.safe_load(NEWEST.read_text(encoding="utf-8"))
    index = next(i for i, s in enumerate(data["steps"]) if s["key"] == "spec-decode-eagle-nightly-b200")
    data["steps"][index]["device"] = device
    data["steps"][index]["automatic_shard"] = True
    path = tmp_path / "spec_decode.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    output = tmp_path / "matrix.yaml"
    result = cli("import", str(path), "--output", str(output))
    assert result.code == 2 and not output.exists()
    assert f"steps.{index}.automatic_shard: ci-infra refuses automatic_shard on device '{device}'" in result.err


def test_automatic_shard_in_the_matrix_follows_the_same_rule(cli, tmp_path):
    text = MATRIX.read_text(encoding="utf-8").replace(
        "  key: spec-decode-eagle-nightly-b200\n", "  key: spec-decode-eagle-nightly-b200\n  automatic_shard: true\n")
    path = tmp_path / "hardware_matrix.yaml"
    path.write_text(text, encoding="utf-8")
    result = cli("--matrix", str(path), "--output", str(tmp_path / "out.yaml"))
    assert result.code == 2 and "automatic_shard: ci-infra refuses automatic_shard on device 'b200-k8s'" in result.err
    assert not (tmp_path / "out.yaml").exists()


def test_automatic_shard_is_read_on_steps_only_as_a_boolean(cli, tmp_path):
    data = yaml.safe_load(NEWEST.read_text(encoding="utf-8"))
    data["steps"][0]["automatic_shard"] = "yes"
    path = tmp_path / "spec_decode.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert "steps.0.automatic_shard: expected true or false" in cli("import", str(path)).err
    data["steps"][0]["automatic_shard"] = True
    data["steps"][0]["mirror"]["amd"]["automatic_shard"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert "steps.0.mirror.amd.automatic_shard: unknown key 'automatic_shard' in the amd mirror" in cli(
        "import", str(path)).err


def test_each_accepted_key_is_one_traced_row():
    """The keys validate lets through are the table's; each row names the ci-infra file that reads it and a commit."""
    names = [row.name for row in ci_infra_keys.KEYS]
    assert len(names) == len(set(names))
    assert validate.CI_INFRA_STEP_KEYS == set(ci_infra_keys.names(ci_infra_keys.STEP))
    assert validate.CI_INFRA_MIRROR_KEYS == set(ci_infra_keys.names(ci_infra_keys.MIRROR))
    for row in ci_infra_keys.KEYS:
        assert re.fullmatch(r"[0-9a-f]{40}", row.commit), row
        assert row.read_in.startswith("buildkite/pipeline_generator/"), row
    assert "automatic_shard" in validate.CI_INFRA_STEP_KEYS and "automatic_shard" not in validate.CI_INFRA_MIRROR_KEYS


def test_the_nightly_check_fails_on_vllms_edit_and_the_annotation_says_what_to_copy(tmp_path, monkeypatch):
    """The suite's test, run in a checkout whose file vLLM edited, is red naming the step and key, and records the
    drift the annotation turns into what to copy."""
    from spec_decode_ci.suites import test_vllm_area

    area = tmp_path / "vllm" / ".buildkite" / "test_areas"
    area.mkdir(parents=True)
    (area / "spec_decode.yaml").write_text(_edited(tmp_path).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "vllm" / "tests").mkdir()
    monkeypatch.chdir(tmp_path / "vllm" / "tests")
    recorded: dict = {}
    with pytest.raises(AssertionError) as failure:
        test_vllm_area.test_vllm_area_file_says_what_the_matrix_says(lambda k, v: recorded.__setitem__(k, v))
    assert "changed  spec-decode-ngram-suffix: timeout_in_minutes (20 in the matrix, 99 in vLLM's file)" in str(
        failure.value)
    results = {"exit_status": 1, "summary": {"failed": 1}, "runner": None, "step": {"key": "k"},
               "vllm": {"version": None}, "device": {"name": "cpu"},
               "cases": [{"id": "test_vllm_area", "runner": None, "figures": {VLLM_AREA_DRIFT: recorded[VLLM_AREA_DRIFT]},
                          "checks": [{"test": "t", "outcome": "failed", "message": "m", "duration_s": 0.1}]}]}
    text = markdown.render(results, [], "no baseline")
    assert "**vLLM edited" in text and "- added `spec-decode-dflash3`" in text
    assert "```yaml\n- label: \":nvidia: (H200 MIG 35GB) Spec Decode MTP Gemma4\"" in text


def test_the_nightly_check_passes_where_vllms_file_is_the_generated_one(monkeypatch):
    from spec_decode_ci.suites import test_vllm_area

    monkeypatch.chdir(REPO_ROOT / "tests")
    recorded: dict = {}
    test_vllm_area.test_vllm_area_file_says_what_the_matrix_says(lambda k, v: recorded.__setitem__(k, v))
    assert recorded[VLLM_AREA_DRIFT]["kept"] and not recorded[VLLM_AREA_DRIFT]["changed"]
