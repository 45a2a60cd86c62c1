"""Stage 2: every key is declared; wrong types, unknown keys and unknown devices are located errors."""

from __future__ import annotations

import pytest

from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.load import parse_text
from spec_decode_ci.generator.model import parse_matrix


def parse(text: str):
    return parse_matrix(parse_text(text, "hardware_matrix.yaml"))


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_repo_matrix_parses(repo_matrix_text):
    matrix = parse(repo_matrix_text)
    assert {"b200", "h200", "h100", "cpu"} <= set(matrix.devices)
    assert {"eagle", "speculators_mtp", "draft_model", "build_path"} <= set(matrix.suites)
    assert matrix.devices["b200"].test_area_device == "b200-k8s"
    assert {"trtllm_prefill", "trtllm_decode"} <= set(matrix.devices["b200"].capabilities)
    assert matrix.devices_with("trtllm_prefill") == ("b200",)
    for name in ("eagle", "speculators_mtp", "draft_model"):
        suite = matrix.suites[name]
        assert (suite.devices, suite.schedule, suite.optional) == (("b200",), "nightly", True)
    assert matrix.suites["build_path"].devices == ("h200_18gb",) and matrix.suites["build_path_b200"].optional
    assert len(matrix.steps) == 18 and all(s.get("mirror") for s in matrix.steps)  # vLLM's own steps


# (replace this, with that, expected message fragment, the needle whose line the error must point at)
MUTATIONS = [
    ("    timeout_in_minutes: 5\n", "    timeout_in_minutes: five\n", "expected an integer between 1 and 1440",
     "timeout_in_minutes: five"),
    ("    timeout_in_minutes: 5\n", "    timeout_in_minutes: 0\n", "expected an integer between 1", "timeout_in_minutes: 0"),
    ("    timeout_in_minutes: 5\n", "    timeout_in_minutes: true\n", "expected an integer", "timeout_in_minutes: true"),
    ("    devices: [cpu, b200]\n", "    devices: [cpu, b300]\n", "unknown device 'b300': add a block under `devices` (did you mean 'b200'?)",
     "devices: [cpu, b300]"),
    ("    devices: [cpu, b200]\n", "    devices: []\n", "expected a non-empty list of strings", "devices: []"),
    ("    devices: [cpu, b200]\n", "    devices: [cpu, cpu]\n", "duplicate entry 'cpu'", "devices: [cpu, cpu]"),
    ("    schedule: every_change\n", "    schedule: weekly\n", "expected one of nightly, every_change", "weekly"),
    ("    schedule: every_change\n", "    schedule: every_change\n    vllm: latest\n",
     "expected a vLLM release such as '0.20.0', a list of them, 'compat_lane' or 'nightly'", "vllm: latest"),
    ("    schedule: every_change\n", "    schedule: every_change\n    needs: [tpu]\n",
     "expected one of cuda, flashinfer, rocm, got 'tpu'", "needs: [tpu]"),
    ("    schedule: every_change\n", "    schedule: every_change\n    nightly: true\n",
     "unknown key 'nightly' in suite 'quoting' (expected one of:", "nightly: true"),
    ("    gpus_per_agent: 0\n", "    gpus_per_agent: 0\n    num_gpus: 1\n", "unknown key 'num_gpus'", "num_gpus"),
    ("    optional: true\n    soft_fail", "    optional: false\n    soft_fail", "a nightly suite must be optional",
     "optional: false"),
    ("    num_devices: 2\n", "    num_devices: 9\n", "expected at most 8 (GPUs per b200 agent)", "num_devices: 9"),
    ("    key: quoting\n", "    key: Quoting Key\n", "expected a step key of lower-case letters", "Quoting Key"),
    ("    compute_capability: \"10.0\"\n", "    compute_capability: 10.0\n", "expected a non-empty string",
     "compute_capability: 10.0"),
    ("      COST: \"$$5 {{ x }}\"\n", "      COST: [1]\n", "expected a string or integer value", "COST: [1]"),
    ("      COST: \"$$5 {{ x }}\"\n", "      1BAD: x\n", "expected an environment variable name", "1BAD"),
    ("    label: Nightly Thing\n", "    label: \"Nightly\\x01\"\n", "control character", "Nightly\\x01"),
    ("    label: Nightly Thing\n", "    label: \"\"\n", "expected a non-empty string", "label: \"\""),
    ("    capabilities: [cuda, trtllm_prefill, trtllm_decode]\n", "    capabilities: [CUDA]\n",
     "expected a capability name", "[CUDA]"),
    ("  junit_dir: junit\n", "  junit_dir: junit\n  artifacts: x\n", "unknown key 'artifacts'", "artifacts: x"),
    ("    timeout_in_minutes: 5\n", "    timout_in_minutes: 5\n",
     "unknown key 'timout_in_minutes' in suite 'quoting' (did you mean 'timeout_in_minutes'?)", "timout_in_minutes"),
    ("  timeout_in_minutes: 25\n", "  timeout_in_minutes: 25\n  torch_nightly: true\n",
     "unknown key 'torch_nightly' in step 1", "torch_nightly"),
    ("  timeout_in_minutes: 25\n", "  timeout_in_minutes: 25\n  num_gpus: 2\n",
     "unknown key 'num_gpus' in step 1 (did you mean 'num_devices'?)", "num_gpus: 2"),
    ("      dind: false\n", "      dind: false\n      num_devics: 2\n",
     "unknown key 'num_devics' in the amd mirror (did you mean 'num_devices'?)", "num_devics"),
    ("  mirror:\n    amd:\n", "  mirror:\n    intel:\n", "unknown key 'intel'", "intel:"),
    ("      device: mi300_1\n", "      device: mi999_1\n", "unknown device 'mi999_1'", "device: mi999_1"),
    ("  parallelism: 2\n", "  parallelism: 2\n  concurrency: 2\n",
     "expected concurrency and concurrency_group together", "concurrency: 2"),
    ("  timeout_in_minutes: 25\n", "  timeout_in_minutes: \"25\"\n", "expected an integer", "\"25\""),
    ("      depends_on: [image-build-amd]\n", "      depends_on: image-build-amd\n",
     "expected a list of strings", "depends_on: image-build-amd"),
    ("  cpu:\n    display_name", "  CPU:\n    display_name", "expected a device name", "CPU:"),
]


@pytest.mark.parametrize("old, new, fragment, needle", MUTATIONS, ids=[m[3] for m in MUTATIONS])
def test_bad_matrix_is_located(tricky_matrix, old, new, fragment, needle):
    text = tricky_matrix.read_text(encoding="utf-8")
    assert old in text
    bad = text.replace(old, new, 1)
    with pytest.raises(InputError) as info:
        parse(bad)
    message = str(info.value)
    assert fragment in message
    assert message.startswith("hardware_matrix.yaml:")
    assert info.value.line == line_of(bad, needle), message


@pytest.mark.parametrize("missing", ["test_area", "devices"])
def test_missing_sections(tricky_matrix, missing):
    import yaml

    data = yaml.safe_load(tricky_matrix.read_text(encoding="utf-8"))
    del data[missing]
    with pytest.raises(InputError, match=f"missing required key '{missing}'"):
        parse(yaml.safe_dump(data))


def test_top_level_must_be_a_mapping():
    with pytest.raises(InputError, match="expected a mapping \\(the hardware matrix\\), got a list"):
        parse("- 1\n")
    with pytest.raises(InputError, match="got nothing"):
        parse("")


def test_the_harness_requirement_defaults_to_the_release_being_generated(tricky_matrix):
    import yaml

    from spec_decode_ci import __version__

    data = yaml.safe_load(tricky_matrix.read_text(encoding="utf-8"))
    del data["harness"]["requirement"]
    assert parse(yaml.safe_dump(data)).harness_requirement == f"spec-decode-ci[suites]=={__version__}"


@pytest.mark.parametrize("requirement", [
    "spec-decode-ci[suites] @ git+https://github.com/example/spec-decode-ci@0123456789abcdef0123456789abcdef01234567",
    "spec-decode-ci[suites] @ https://example.org/wheels/spec_decode_ci-0.3.0-py3-none-any.whl",
    "spec-decode-ci[suites]>=0.3,<0.4",
])
def test_the_harness_requirement_takes_any_pip_requirement(tricky_matrix, requirement):
    text = tricky_matrix.read_text(encoding="utf-8").replace('"spec-decode-ci==9.9.9"', f'"{requirement}"')
    assert parse(text).harness_requirement == requirement


@pytest.mark.parametrize("requirement", ["spec-decode-ci[suites", "spec-decode-ci ==", "git+https://x/y@z"])
def test_a_harness_requirement_pip_cannot_read_is_located(tricky_matrix, requirement):
    text = tricky_matrix.read_text(encoding="utf-8").replace('"spec-decode-ci==9.9.9"', f'"{requirement}"')
    with pytest.raises(InputError) as info:
        parse(text)
    assert info.value.path == "harness.requirement" and info.value.line == line_of(text, requirement)
    assert "expected a pip requirement (PEP 508" in info.value.message


def test_misspelt_required_key_names_the_misspelling_not_the_missing_key(tricky_matrix):
    text = tricky_matrix.read_text(encoding="utf-8")
    bad = text.replace("    label: Nightly Thing\n", "    lable: Nightly Thing\n")
    with pytest.raises(InputError) as info:
        parse(bad)
    assert "unknown key 'lable' in suite 'nightly' (did you mean 'label'?)" in str(info.value)
    assert info.value.line == line_of(bad, "lable")


def test_build_path_suite_on_a_cpu_device_is_located(repo_matrix_text):
    """ci-infra runs cpu steps in vLLM's CPU image, which has no FlashInfer: the build-path suite cannot run there."""
    old = "    devices: [h200_18gb]\n    schedule: every_change\n    timeout_in_minutes: 20\n"
    assert old in repo_matrix_text
    bad = repo_matrix_text.replace(old, old.replace("h200_18gb", "cpu"), 1)
    with pytest.raises(InputError) as info:
        parse(bad)
    message = str(info.value)
    assert "suites.build_path.devices" in message and "device 'cpu' runs in vLLM's CPU image" in message
    assert "lacks cuda, flashinfer that suite 'build_path' needs" in message
    assert "(e.g. h200_18gb," in message
    assert info.value.line == line_of(bad, "    devices: [cpu]\n    schedule: every_change\n    timeout_in_minutes: 20")


def test_nightly_wheel_needs_its_index(repo_matrix_text):
    bad = repo_matrix_text.replace("  vllm_nightly_index: https://wheels.vllm.ai/nightly\n", "")
    with pytest.raises(InputError, match="expected harness.vllm_nightly_index \\(suite 'build_path_vllm_main'"):
        parse(bad)
