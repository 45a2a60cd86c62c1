"""The generated test-area file can replace vLLM's own spec_decode.yaml: for every step of vLLM's file (a copy
from commit e6fb96a7, tests/generator/data/vllm/SOURCES.md) it has a step with the same key that ci-infra turns
into the same Buildkite step, and the harness's steps sit beside them under keys of their own."""

from __future__ import annotations

import pytest
import yaml

from spec_decode_ci.generator.expand import expand
from spec_decode_ci.generator.model import load_matrix
from tests.generator.ci_infra_meaning import differences, effective_steps
from tests.generator.conftest import DATA, REPO_ROOT

AREA_PATH = ".buildkite/test_areas/spec_decode.yaml"  # both files live there in vLLM's repository
VLLM = effective_steps(yaml.safe_load((DATA / "vllm" / "spec_decode.yaml").read_text(encoding="utf-8")), AREA_PATH)
OURS = effective_steps(yaml.safe_load((REPO_ROOT / AREA_PATH).read_text(encoding="utf-8")), AREA_PATH)
MATRIX = load_matrix(REPO_ROOT / "hardware_matrix.yaml")
NEEDS = {step.key: step.suite.needs for step in expand(MATRIX, lambda where, message: AssertionError(message))
         if step.suite is not None}


def test_vllm_file_has_its_eighteen_steps_with_amd_mirrors():
    assert len(VLLM) == 18 and all("mirror_amd" in step for step in VLLM.values())


@pytest.mark.parametrize("key", sorted(VLLM))
def test_every_vllm_step_keeps_its_meaning(key):
    assert key in OURS, f"vLLM's step {key!r} is missing from the generated file"
    assert differences(VLLM[key], OURS[key]) == {}


def test_harness_steps_are_extra_and_run_in_vllms_image():
    ours_only = {key: step for key, step in OURS.items() if key not in VLLM}
    assert {"spec-decode-eagle-harness-nightly-b200", "spec-decode-vllm-area-harness-nightly-cpu", "spec-decode-speculators-mtp-harness-nightly-b200",
            "spec-decode-draft-model-harness-nightly-b200", "spec-decode-build-path-harness-h200-18gb"} <= set(ours_only)
    for key, step in ours_only.items():
        assert step["working_dir"] == "/vllm-workspace/tests"  # ci-infra's default: no `cd` into a missing dir
        assert step["commands"][0].startswith("python -m pip install --quiet 'spec-decode-ci[suites]==")
        assert "buildkite-agent artifact upload" in step["commands"][-1] and step["mount_buildkite_agent"]
        if "flashinfer" not in NEEDS[key]:
            continue  # e.g. the comparison of vLLM's file with the matrix, which needs nothing of the image
        # vLLM's CPU image has no FlashInfer: every harness step that drives it runs in the CUDA image
        assert "image-build-cpu" not in step["depends_on"] and step["queue"] not in {
            "cpu_queue_premerge_us_east_1", "small_cpu_queue_premerge", "medium_cpu_queue_premerge"}, step


def test_the_comparison_sees_a_changed_meaning():
    """A step that differs in one field the Buildkite step depends on is reported, with both values."""
    changed = yaml.safe_load((DATA / "vllm" / "spec_decode.yaml").read_text(encoding="utf-8"))
    changed["steps"][0]["mirror"]["amd"]["device"] = "mi355_1"
    changed["steps"][1].pop("device")
    altered = effective_steps(changed, AREA_PATH)
    assert set(differences(VLLM["v1-spec-decode"], altered["v1-spec-decode"])) == {"mirror_amd"}
    assert set(differences(VLLM["spec-decode-eagle-1-deepseek-qwen"],
                           altered["spec-decode-eagle-1-deepseek-qwen"])) == {"device", "queue"}
