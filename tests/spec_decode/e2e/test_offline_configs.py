"""Offline tier: every e2e case's engine configuration, built by vLLM on CPU from tiny local configs.

vLLM API drift (a renamed argument, a removed key, a changed detection of speculators checkpoints) turns
this red in every CI run, before the nightly B200 steps meet it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spec_decode_ci import compat
from spec_decode_ci.e2e import cases, fake_hub
from spec_decode_ci.emulation import emulated_platform

pytestmark = pytest.mark.e2e_offline

CONFIG = cases.load()
E2E_SUITES = ("eagle", "speculators_mtp", "draft_model")
CASES = [case for suite in E2E_SUITES for case in CONFIG.cases(suite)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf") / "hub"
    for case in CASES:
        fake_hub.populate(cache, case)
    with fake_hub.offline_hub(cache):
        yield cache


def names(hub, value: str, repo_id: str) -> bool:
    """vLLM keeps a repo id, or resolves it to its snapshot in the (offline) cache."""
    return value == repo_id or Path(value) == fake_hub.snapshot_dir(hub, repo_id)


def engine_config(case, speculative: bool):
    from vllm.engine.arg_utils import EngineArgs

    with emulated_platform():
        kwargs = {**cases.engine_kwargs(CONFIG, case, speculative), "skip_tokenizer_init": True}  # configs only
        return EngineArgs(**kwargs).create_engine_config()


def test_every_e2e_suite_has_cases():
    assert all(CONFIG.cases(s) for s in E2E_SUITES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.suite}-{c.id}" for c in CASES])
def test_engine_config(hub, case):
    config = engine_config(case, speculative=True)
    spec = config.speculative_config
    assert spec is not None, "no speculative config"
    assert spec.method == case.method
    assert spec.num_speculative_tokens == case.num_speculative_tokens
    assert names(hub, config.model_config.model, case.target)  # a speculators checkpoint names its verifier
    if case.speculators or case.draft:
        assert names(hub, spec.model, case.speculators or case.draft)
    assert spec.draft_model_config is not None
    if compat.drafter_attention_backend_settable():
        assert getattr(spec.attention_backend, "name", spec.attention_backend) == CONFIG.engine.attention_backend

    e = CONFIG.engine
    assert config.attention_config.backend.name == e.attention_backend
    assert config.attention_config.use_trtllm_attention is e.use_trtllm_attention
    assert config.scheduler_config.async_scheduling is e.async_scheduling
    assert config.scheduler_config.enable_chunked_prefill is e.enable_chunked_prefill
    assert config.scheduler_config.max_num_seqs == e.max_num_seqs > 1


@pytest.mark.parametrize("case", CASES, ids=[f"{c.suite}-{c.id}" for c in CASES])
def test_baseline_engine_config_has_no_speculation(hub, case):
    config = engine_config(case, speculative=False)
    assert config.speculative_config is None
    assert names(hub, config.model_config.model, case.target)


SMOKE = cases.load(str(cases.SMOKE_CONFIG_PATH))
SMOKE_CASES = [case for suite in SMOKE.suites for case in SMOKE.cases(suite)]


@pytest.mark.parametrize("case", SMOKE_CASES, ids=[f"smoke-{c.suite}-{c.id}" for c in SMOKE_CASES])
def test_smoke_engine_config(tmp_path, case):
    """The GPU smoke's cases too, with its tiny models as local directories (configs only)."""
    from vllm.engine.arg_utils import EngineArgs

    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    config = SMOKE.with_models(write_tiny_models(tmp_path, SMOKE.tiny_models, SMOKE.tiny_eagle3_heads, weights=False))
    case = next(c for c in config.cases(case.suite) if c.id == case.id)
    with emulated_platform():
        engine = EngineArgs(**cases.engine_kwargs(config, case, speculative=True)).create_engine_config()
    assert engine.speculative_config.method == case.method
    assert engine.model_config.model == case.target
    if compat.drafter_attention_backend_settable():
        assert getattr(engine.speculative_config.attention_backend, "name", None) == config.engine.attention_backend
