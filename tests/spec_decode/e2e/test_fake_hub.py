"""spec_decode_ci.e2e.fake_hub: the offline cache is seen wherever a hub client keeps its own copy of the cache
path (transformers 4 copies it into ``TRANSFORMERS_CACHE`` at import), and everything is restored after."""

from __future__ import annotations

import sys
import types

import pytest

from spec_decode_ci.e2e import fake_hub

pytestmark = pytest.mark.e2e_offline


def test_module_level_copies_of_the_cache_path_point_at_the_fake_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    default = constants.HF_HUB_CACHE
    probe = types.ModuleType("transformers.spec_decode_ci_probe")
    probe.TRANSFORMERS_CACHE, probe.unrelated = default, default  # only constant-style names are copies
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    with fake_hub.offline_hub(tmp_path) as cache:
        assert constants.HF_HUB_CACHE == probe.TRANSFORMERS_CACHE == str(cache)
        assert constants.HF_HUB_OFFLINE is True and probe.unrelated == default
    assert constants.HF_HUB_CACHE == probe.TRANSFORMERS_CACHE == default


def test_a_populated_case_resolves_offline_through_transformers(tmp_path):
    """transformers finds a tiny config under the real repo id in the fake cache, with no network."""
    from transformers import AutoConfig

    from spec_decode_ci.e2e import cases

    case = cases.load().cases("draft_model")[0]
    fake_hub.populate(tmp_path, case)
    with fake_hub.offline_hub(tmp_path):
        config = AutoConfig.from_pretrained(case.target)
    assert config.num_hidden_layers == fake_hub.tiny_models.LAYERS
