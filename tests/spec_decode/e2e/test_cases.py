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


@pytest.mark.parametrize("edit,path,expected", [
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
