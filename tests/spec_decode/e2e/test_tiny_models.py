"""The GPU smoke's random-weight model keeps its greedy choices through bf16 rounding, so that comparing the
speculative run with the plain one tests speculation rather than numerics."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import pytest

from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.runner import prompts
from spec_decode_ci.e2e.tiny_models import write_weights

pytestmark = pytest.mark.e2e_offline
SMOKE = cases.load(str(cases.SMOKE_CONFIG_PATH))


def greedy(model_dir, dtype, token_prompts, steps):
    import json

    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    written = json.loads((Path(model_dir) / "config.json").read_text())
    if written["model_type"] == "mimo":  # Qwen2 layers
        config = Qwen2Config.from_dict(written)
        model = Qwen2ForCausalLM.from_pretrained(model_dir, config=config, torch_dtype=dtype).eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).eval()
    out = []
    with torch.no_grad():
        for ids in token_prompts:
            seq = model.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
            out.append(seq[0, len(ids):].tolist())
    return out


def pairs_ahead(target_dir, ahead: int):
    """(token at t, the target's token at t + ``ahead``) at every generated step of the target's own greedy run
    on the smoke prompts."""
    import torch

    token_prompts = [p["prompt_token_ids"] for p in prompts(SMOKE)]
    runs = [ids + out for ids, out in zip(token_prompts, greedy(target_dir, torch.bfloat16, token_prompts,
                                                                  SMOKE.max_tokens))]
    return [(seq[t], seq[t + ahead]) for ids, seq in zip(token_prompts, runs)
            for t in range(len(ids) - 1, len(seq) - ahead)]


def assert_every_proposal_right(proposal, pairs, what: str) -> None:
    """``proposal[token]`` (a drafter's proposal after ``token``) is the target's token in each pair."""
    right = sum(int(proposal[a]) == b for a, b in pairs)
    assert right == len(pairs), f"{what} right on {right}/{len(pairs)} steps"


@pytest.mark.parametrize("name,family", sorted(SMOKE.tiny_models.items()))
def test_greedy_survives_bf16(tmp_path, name, family):
    import torch

    model_dir = write_weights(tmp_path / name, family)
    token_prompts = [p["prompt_token_ids"] for p in prompts(SMOKE)]
    steps = SMOKE.max_tokens
    assert greedy(model_dir, torch.float32, token_prompts, steps) == greedy(model_dir, torch.bfloat16,
                                                                              token_prompts, steps)


@pytest.mark.parametrize("head,target", sorted(SMOKE.tiny_eagle3_heads.items()))
def test_eagle3_head_first_proposal_is_two_tokens_on(tmp_path, head, target):
    """The head's first proposal, read off its weights (fc keeps the layer-0 aux state, the target's embedding of
    token t; the damped layer left out), is the target's greedy token at t+2 in the target's own run."""
    from safetensors.torch import load_file

    from spec_decode_ci.e2e.tiny_models import EAGLE3_AUX_LAYERS, write_eagle3_weights

    assert EAGLE3_AUX_LAYERS[0] == 0, "the first aux state must be the target's input embedding"
    target_dir = write_weights(tmp_path / target, SMOKE.tiny_models[target])
    head_weights = load_file(str(write_eagle3_weights(tmp_path / head, target_dir) / "model.safetensors"))
    embed = load_file(str(target_dir / "model.safetensors"))["model.embed_tokens.weight"].float()
    hidden = embed.shape[1]
    state = embed @ head_weights["fc.weight"].float()[:, :hidden].T  # fc(aux) with aux = (embed[t], 0, 0)
    proposal = (state @ head_weights["lm_head.weight"].float().T).argmax(-1)  # token id -> first proposal
    assert_every_proposal_right(proposal, pairs_ahead(target_dir, 2), "first proposal")


def test_mtp_layer_proposes_the_targets_next_token(tmp_path):
    """The MTP layer's proposal read off its weights (input_proj keeps the token embedding; the damped layer
    left out; the final norm does not change an argmax) is, for token t+1, the target's own next token."""
    from safetensors.torch import load_file

    from spec_decode_ci.e2e.tiny_models import MTP_PREFIX

    (name, family), = [(n, f) for n, f in SMOKE.tiny_models.items() if f == "mimo"]
    target_dir = write_weights(tmp_path / name, family)
    weights = load_file(str(target_dir / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"].float()
    hidden = embed.shape[1]
    state = embed @ weights[MTP_PREFIX + "input_proj.weight"].float()[:, hidden:].T  # (0, embed[t+1]) in
    proposal = (state @ weights["lm_head.weight"].float().T).argmax(-1)
    assert_every_proposal_right(proposal, pairs_ahead(target_dir, 1), "MTP proposal")


@pytest.mark.parametrize("head,target", sorted(SMOKE.tiny_eagle1_heads.items()))
def test_eagle1_head_proposes_the_targets_next_token(tmp_path, head, target):
    """The EAGLE-1 head's proposal read off its weights (fc keeps the token embedding; the damped layer left out)
    through the target's LM head is, for token t+1, the target's own next token: every proposal of a step."""
    from safetensors.torch import load_file

    from spec_decode_ci.e2e.tiny_models import write_eagle1_weights

    target_dir = write_weights(tmp_path / target, SMOKE.tiny_models[target])
    head_weights = load_file(str(write_eagle1_weights(tmp_path / head, target_dir) / "model.safetensors"))
    target_weights = load_file(str(target_dir / "model.safetensors"))
    embed = target_weights["model.embed_tokens.weight"].float()
    hidden = embed.shape[1]
    state = embed @ head_weights["fc.weight"].float()[:, :hidden].T  # fc(embed[t+1], h_t) with h_t left out
    proposal = (state @ target_weights["lm_head.weight"].float().T).argmax(-1)
    assert_every_proposal_right(proposal, pairs_ahead(target_dir, 1), "EAGLE-1 proposal")


@contextmanager
def vllm_model_on_cpu(vllm_config, model_config, tmp_path):
    """vLLM's own model class for ``model_config``, constructed on the CPU in a one-rank gloo group."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.platforms import current_platform

    from spec_decode_ci.emulation import emulated_platform

    model_class, _ = get_model_architecture(model_config)
    vllm_config.device_config.device = torch.device("cpu")
    dtype = torch.get_default_dtype()
    with ExitStack() as stack:
        stack.enter_context(emulated_platform())
        stack.enter_context(set_current_vllm_config(vllm_config))
        # Fake: selecting an attention backend needs a CUDA device; the layers are built, never run here.
        stack.enter_context(mock.patch.object(type(current_platform), "get_attn_backend_cls",
                                              lambda *a, **k: TRITON_ATTENTION_BACKEND))
        parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                    distributed_init_method=f"file://{tmp_path / 'rendezvous'}")
        try:
            parallel_state.initialize_model_parallel(1, 1)
            torch.set_default_dtype(model_config.dtype)
            yield model_class(vllm_config=vllm_config, prefix="")
        finally:
            torch.set_default_dtype(dtype)
            parallel_state.destroy_model_parallel()
            parallel_state.destroy_distributed_environment()


TRITON_ATTENTION_BACKEND = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"


@pytest.mark.parametrize("head,target", sorted(SMOKE.tiny_speculators.items()))
def test_speculators_checkpoint_loads_and_proposes_through_d2t(tmp_path, head, target):
    """vLLM reads the tiny speculators checkpoint through its speculators config path (the smoke case's engine
    arguments), its own EAGLE-3 class loads every weight (none left unset), and that model's
    first proposal (fc of the aux states, the damped layer left out, logits mapped through the checkpoint's
    draft vocabulary) is the target's greedy token two on at every step of the target's run."""
    import torch
    from safetensors.torch import load_file
    from vllm.engine.arg_utils import EngineArgs

    from spec_decode_ci.e2e.tiny_models import write_tiny_models
    from spec_decode_ci.emulation import emulated_platform

    (case_id,) = [c.id for s in SMOKE.suites for c in SMOKE.cases(s) if c.speculators == head]
    config = SMOKE.with_models(write_tiny_models(tmp_path, {target: SMOKE.tiny_models[target]},
                                                 {"speculators": {head: target}}, weights=True))
    (case,) = [c for s in config.suites for c in config.cases(s) if c.id == case_id]
    with emulated_platform():
        engine = EngineArgs(**cases.engine_kwargs(config, case, speculative=True)).create_engine_config()
    draft = engine.speculative_config.draft_model_config
    assert type(draft.hf_config).__name__ == "SpeculatorsConfig", type(draft.hf_config)
    assert engine.speculative_config.method == "eagle3"

    checkpoint = load_file(str(Path(case.speculators) / "model.safetensors"))
    target_weights = load_file(str(Path(case.target) / "model.safetensors"))
    with vllm_model_on_cpu(engine, draft, tmp_path) as model, torch.no_grad():
        def unset(p):  # a value no weight or index mapping has
            return float("nan") if p.is_floating_point() else torch.iinfo(p.dtype).min

        for parameter in model.parameters():
            parameter.data.fill_(unset(parameter))
        model.load_weights(checkpoint.items())
        unloaded = [n for n, p in model.named_parameters()
                    if (p.isnan() if p.is_floating_point() else p == unset(p)).any()]
        assert not unloaded, f"left unloaded by vLLM: {unloaded}"
        embed = target_weights["model.embed_tokens.weight"]
        aux = torch.cat([embed, torch.randn(embed.shape[0], 2 * embed.shape[1], dtype=embed.dtype)], dim=1)
        proposal = model.compute_logits(model.combine_hidden_states(aux)).argmax(-1)
    assert_every_proposal_right(proposal, pairs_ahead(case.target, 2), "first proposal")
