"""Offline tier: every e2e case's engine configuration, built by vLLM on CPU from tiny local configs.

vLLM API drift (a renamed argument, a removed key, a changed detection of speculators checkpoints) turns
this red in every CI run, before the nightly B200 steps meet it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spec_decode_ci import compat
from spec_decode_ci.e2e import cases, fake_hub
from . import e2e_suites

pytestmark = pytest.mark.e2e_offline

CONFIG = cases.load()
CASES = [case for suite in e2e_suites() for case in CONFIG.cases(suite)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with fake_hub.offline_hub_of(tmp_path_factory.mktemp("hf") / "hub", CASES) as cache:
        yield cache


def names(hub, value: str, repo_id: str) -> bool:
    """vLLM keeps a repo id, or resolves it to its snapshot in the (offline) cache."""
    return value == repo_id or Path(value) == fake_hub.snapshot_dir(hub, repo_id)


def engine_config(case, speculative: bool):
    return cases.offline_engine_config(CONFIG, case, speculative)


def test_every_e2e_suite_has_cases():
    assert e2e_suites() and all(CONFIG.cases(s) for s in e2e_suites())


def graphs_as_configured(engine, config, case) -> None:
    """torch.compile and CUDA graphs asked for, as vLLM runs by default, unless the case is its suite's eager one.
    (Which graph mode vLLM then resolves is decided on the GPU, by the attention backends: the e2e check reads it.)"""
    compilation, eager = engine.compilation_config, cases.eager(config, case)
    assert engine.model_config.enforce_eager is eager, (
        f"expected enforce_eager {eager} for {case.id}; came {engine.model_config.enforce_eager}. Look: "
        f"cases.engine_kwargs, the case's enforce_eager")
    if eager:
        assert compilation.cudagraph_mode.name == "NONE", f"eager case {case.id} has {compilation.cudagraph_mode}"
    else:
        assert compilation.mode.name == "VLLM_COMPILE", (
            f"expected torch.compile (VLLM_COMPILE) for {case.id}; came {compilation.mode.name}")


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
        pinned = getattr(spec.attention_backend, "name", spec.attention_backend)
        dropped = (": for a speculators-format checkpoint this vLLM replaces the speculative config with the "
                   "checkpoint's own, dropping the override; the drafter then selects its backend itself (the "
                   "e2e check test_every_layer_on_the_configured_backend reports which)") if case.speculators else ""
        assert pinned == CONFIG.engine.attention_backend, (
            f"drafter attention backend {pinned!r}, not the {CONFIG.engine.attention_backend} passed in "
            f"speculative_config{dropped}")

    graphs_as_configured(config, CONFIG, case)
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
SMOKE_CASES = [(suite, i) for suite in SMOKE.suites for i in range(len(SMOKE.cases(suite)))]


@pytest.fixture(scope="module")
def smoke_config(tmp_path_factory):
    """The GPU smoke's configuration with its tiny models as local directories (configs only)."""
    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    root = tmp_path_factory.mktemp("tiny-models")
    return SMOKE.with_models(write_tiny_models(root, SMOKE.tiny_models, SMOKE.tiny_heads, weights=False))


@pytest.mark.parametrize("suite,index", SMOKE_CASES,
                         ids=[f"smoke-{s}-{SMOKE.cases(s)[i].id}" for s, i in SMOKE_CASES])
def test_smoke_engine_config(smoke_config, suite, index):
    """The GPU smoke's cases build their engine configuration too."""
    config, case = smoke_config, smoke_config.cases(suite)[index]
    engine = cases.offline_engine_config(config, case, speculative=True)
    graphs_as_configured(engine, config, case)
    assert engine.speculative_config.method == case.method
    assert engine.model_config.model == case.target
    if compat.drafter_attention_backend_settable():
        assert getattr(engine.speculative_config.attention_backend, "name", None) == config.engine.attention_backend
