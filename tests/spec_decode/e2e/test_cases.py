"""The e2e suite configurations parse, and bad ones fail with a located error (file, line, key, expectation)."""

from __future__ import annotations

import pytest
import yaml

from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.e2e import cases

pytestmark = pytest.mark.e2e_offline


@pytest.mark.parametrize("path", [cases.CONFIG_PATH, cases.SMOKE_CONFIG_PATH], ids=lambda p: p.name)
def test_committed_configs_parse(path):
    config = cases.parse(path)
    assert config.suites and all(config.cases(s) for s in config.suites)
    for heads in config.tiny_heads.values():
        for head, target in heads.items():
            assert target in config.tiny_models and head not in config.tiny_models


def smoke_with(tmp_path, edit):
    data = yaml.safe_load(cases.SMOKE_CONFIG_PATH.read_text())
    edit(data)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def head_of_unknown_model(data):
    data["tiny_eagle3_heads"] = {"tiny-llama-eagle3": "tiny-qwen"}


def head_named_like_a_target(data):
    data["tiny_eagle3_heads"] = {"tiny-llama": "tiny-llama"}


def speculators_named_like_an_eagle3_head(data):
    data["tiny_speculators"] = {"tiny-llama-eagle3": "tiny-llama"}


def unknown_case_key(data):
    data["suites"]["eagle"][0]["drafter"] = "x"


def eagle_without_draft(data):
    del data["suites"]["eagle"][0]["draft"]


def unknown_family(data):
    data["tiny_models"]["tiny-llama"] = "gpt2"


def rtol_without_reference(data):
    case = data["suites"]["eagle"][0]
    case.pop("acceptance_per_position", None)
    case.pop("acceptance_per_position_tolerance", None)
    case["acceptance_per_position_rtol"] = 0.05


def rtol_and_tolerance(data):
    case = data["suites"]["eagle"][0]
    case.update(acceptance_per_position=[1.0, 0.0, 0.0], acceptance_per_position_tolerance=0.1,
                acceptance_per_position_rtol=0.05)


def unknown_prompt_set(data):
    data["suites"]["eagle"][0]["prompt_set"] = "sharegpt"


@pytest.mark.parametrize("edit,path,expected", [
    (rtol_without_reference, "suites.eagle.0.acceptance_per_position_rtol", "expected acceptance_per_position"),
    (rtol_and_tolerance, "suites.eagle.0.acceptance_per_position_rtol", "not both"),
    (unknown_prompt_set, "suites.eagle.0.prompt_set", "expected one of"),
    (head_of_unknown_model, "tiny_eagle3_heads.tiny-llama-eagle3", "expected one of"),
    (head_named_like_a_target, "tiny_eagle3_heads.tiny-llama", "not used for another tiny model"),
    (speculators_named_like_an_eagle3_head, "tiny_speculators.tiny-llama-eagle3", "not used for another tiny model"),
    (unknown_case_key, "suites.eagle.0.drafter", "unknown key 'drafter'"),
    (eagle_without_draft, "suites.eagle.0", "needs a 'draft' checkpoint"),
    (unknown_family, "tiny_models.tiny-llama", "expected one of"),
])
def test_bad_config_is_a_located_error(tmp_path, edit, path, expected):
    with pytest.raises(InputError) as raised:
        cases.parse(smoke_with(tmp_path, edit))
    error = raised.value
    assert error.file.endswith("config.yaml") and error.line is not None
    assert error.path == path and expected in error.message, str(error)


def test_vllms_acceptance_references_are_cases_on_its_prompts():
    """The nightly's real EAGLE-3 cases of vLLM's acceptance-length test run on its prompts (MT-Bench) with its
    per-position references and one-sided tolerance."""
    references = {c.draft: c for c in cases.parse(cases.CONFIG_PATH).cases("eagle") if c.prompt_set == "mt_bench"}
    assert references["RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"].acceptance_per_position == (
        0.7296, 0.5208, 0.3545)
    assert references["RedHatAI/Qwen3-8B-speculator.eagle3"].acceptance_per_position == (0.6541, 0.3993, 0.2020)
    assert {(c.num_speculative_tokens, c.acceptance_per_position_rtol) for c in references.values()} == {(3, 0.05)}


@pytest.mark.parametrize("path", [cases.CONFIG_PATH, cases.SMOKE_CONFIG_PATH], ids=lambda p: p.name)
def test_each_suite_runs_graphs_and_keeps_one_eager_case(path):
    """CUDA graphs and torch.compile as vLLM runs by default, and one eager case per suite."""
    config = cases.parse(path)
    for suite, suite_cases in config.suites.items():
        eager = [c.id for c in suite_cases if cases.eager(config, c)]
        assert len(eager) == 1 and len(eager) < len(suite_cases), (
            f"expected one eager case in suite {suite} of {path.name} beside cases with graphs; came eager {eager} "
            f"of {[c.id for c in suite_cases]}")
