"""The GPU smoke's tiny models follow their rule (spec_decode_ci/e2e/tiny_models.py, FACTOR) in fp32 and bf16:
the target's greedy choice depends on the previous token through a RoPE attention head (so on positions), and
every drafter's proposal read off its weights is the rule's choice, so that the e2e suites' acceptance is known
in advance and a position or hidden-state bug in vLLM changes it."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import pytest

from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.engine_run import prompts
from spec_decode_ci.e2e.checks import weights_continuations
from spec_decode_ci.e2e.tiny_models import NORMED, target_rule, weights_of, write_weights
from spec_decode_ci.tiny_configs import HEAD_DIM, HEADS, KV_HEADS

pytestmark = pytest.mark.harness
SMOKE = cases.load(str(cases.SMOKE_CONFIG_PATH))
TOKEN_PROMPTS = [p["prompt_token_ids"] for p in prompts(SMOKE)]


def hf_model(model_dir, dtype):
    """transformers' model for a tiny target (a MiMo target's layers are Qwen2's)."""
    import json

    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    written = json.loads((Path(model_dir) / "config.json").read_text())
    if written["model_type"] == "mimo":
        return Qwen2ForCausalLM.from_pretrained(model_dir, config=Qwen2Config.from_dict(written),
                                                torch_dtype=dtype).eval()
    return AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).eval()


def greedy(model, token_prompts, steps):
    import torch

    with torch.no_grad():
        return [model.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps,
                               do_sample=False)[0, len(ids):].tolist() for ids in token_prompts]


def target_runs(target_dir) -> list[list[int]]:
    """Each smoke prompt followed by the rule's continuation (what the target generates: checked below)."""
    return [ids + more for ids, more in zip(TOKEN_PROMPTS, weights_continuations(SMOKE, target_dir))]


def drafting_pairs(target_dir):
    """(token t, token t+1) at every step where the smoke's drafters propose: from each prompt's last token on."""
    return [(seq[t], seq[t + 1]) for ids, seq in zip(TOKEN_PROMPTS, target_runs(target_dir))
            for t in range(len(ids) - 2, len(seq) - 1)]


def assert_every_proposal_right(proposal, rule, pairs, what: str) -> None:
    """``proposal(prev, cur)`` is the rule's choice after (prev, cur) at every pair."""
    right = sum(proposal(p, c) == rule(p, c) for p, c in pairs)
    assert right == len(pairs), f"{what} right on {right}/{len(pairs)} steps"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name,family", sorted(SMOKE.tiny_models.items()))
def test_target_follows_its_rule(tmp_path, name, family, dtype):
    """The target's greedy run on the smoke prompts is the rule's continuation, in fp32 and in bf16."""
    import torch

    model_dir = write_weights(tmp_path / name, family)
    generated = greedy(hf_model(model_dir, getattr(torch, dtype)), TOKEN_PROMPTS, SMOKE.max_tokens)
    assert generated == [seq[len(ids):] for ids, seq in zip(TOKEN_PROMPTS, target_runs(model_dir))]


@pytest.mark.parametrize("name,family", sorted(SMOKE.tiny_models.items()))
def test_target_choice_depends_on_position(tmp_path, name, family):
    """The last token's position moved one on changes the target's next token on most prompts (its head then
    reads the last token itself instead of the one before): a position bug in vLLM changes the output."""
    import torch

    model = hf_model(write_weights(tmp_path / name, family), torch.bfloat16)
    changed = 0
    with torch.no_grad():
        for ids in TOKEN_PROMPTS:
            positions = torch.arange(len(ids))[None]
            shifted = positions.clone()
            shifted[0, -1] += 1
            chosen = [model(torch.tensor([ids]), position_ids=p).logits[0, -1].argmax().item()
                      for p in (positions, shifted)]
            changed += chosen[0] != chosen[1]
    assert changed >= len(TOKEN_PROMPTS) // 2, f"a shifted position changed the next token on {changed}/" \
                                                 f"{len(TOKEN_PROMPTS)} prompts"


def _value_through_head(layer: dict, prefix: str, head: int, normed_embedding):
    """What attention head ``head`` of a construction layer adds to the hidden state when it attends to one
    token only (its peak): o_proj of that head applied to kv head 0's value of the token."""
    value = layer[prefix + "self_attn.v_proj.weight"].float()[:HEAD_DIM, :normed_embedding.shape[-1]] @ normed_embedding
    return layer[prefix + "self_attn.o_proj.weight"].float()[:, head * HEAD_DIM:(head + 1) * HEAD_DIM] @ value


@pytest.mark.parametrize("head,target", sorted(SMOKE.tiny_heads["eagle1"].items()))
def test_eagle1_head_proposes_by_the_rule_and_depends_on_position(tmp_path, head, target):
    """The EAGLE-1 head run as transformers' Llama layer over its own sequence (position t holds token t+1, its
    input fc(embed[t+1]); the target's LM head) proposes the rule's choice at every position, so every later
    proposal of a step too; with the positions of later proposals one late it does not."""
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from spec_decode_ci.e2e.tiny_models import write_eagle1_weights

    target_dir = write_weights(tmp_path / target, SMOKE.tiny_models[target])
    head_dir = write_eagle1_weights(tmp_path / head)
    head_weights, target_weights = weights_of(head_dir), weights_of(target_dir)
    config = LlamaConfig.from_dict(json.loads((head_dir / "config.json").read_text()))
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    state = {"model.norm.weight": torch.ones(config.hidden_size), "lm_head.weight": target_weights["lm_head.weight"],
             "model.embed_tokens.weight": target_weights["model.embed_tokens.weight"],
             "model.layers.0.input_layernorm.weight": torch.ones(config.hidden_size)}  # transformers' norm in
    state.update({"model." + k: v for k, v in head_weights.items() if k.startswith("layers.")})
    model.load_state_dict({k: v.to(torch.bfloat16) for k, v in state.items()}, strict=True)
    fc = head_weights["fc.weight"].float()
    embed = target_weights["model.embed_tokens.weight"].float()
    right = late_right = total = 0
    with torch.no_grad():
        for ids, seq in zip(TOKEN_PROMPTS, target_runs(target_dir)):
            inputs = (embed[torch.tensor(seq[1:])] @ fc[:, :embed.shape[1]].T)[None].to(torch.bfloat16)
            proposals = model(inputs_embeds=inputs).logits[0].argmax(-1).tolist()  # position t: token t+2
            right += sum(proposals[t] == seq[t + 2] for t in range(len(ids) - 1, len(seq) - 2))
            total += len(seq) - 1 - len(ids)
            # a step's second proposal (position t+1, after the right first one) with its position one late
            for t in range(len(ids) - 1, len(seq) - 3):
                positions = torch.arange(t + 2)[None]
                positions[0, -1] += 1
                late = model(inputs_embeds=inputs[:, :t + 2], position_ids=positions).logits[0, -1].argmax()
                late_right += int(late) == seq[t + 3]
    assert right == total, f"EAGLE-1 proposals right on {right}/{total} steps"
    assert late_right < total // 2, f"second proposals one position late still right on {late_right}/{total} steps"


@pytest.mark.parametrize("head,target", sorted(SMOKE.tiny_heads["eagle3"].items()))
def test_eagle3_first_proposal_is_the_rules_choice(tmp_path, head, target):
    """The head's first proposal read off its weights (fc of aux state 0, the target's embedding of token t;
    head 1 copying token t+1's first factor at its peak; the MLP nothing) is the rule's choice after
    (token t, token t+1) at every drafting step of the target's run."""
    from spec_decode_ci.e2e.tiny_models import EAGLE3_AUX_LAYERS, write_eagle3_weights

    assert EAGLE3_AUX_LAYERS[0] == 0, "the first aux state must be the target's input embedding"
    target_dir = write_weights(tmp_path / target, SMOKE.tiny_models[target])
    weights = {k: v.float() for k, v in weights_of(write_eagle3_weights(tmp_path / head, target_dir)).items()}
    embed = weights_of(target_dir)["model.embed_tokens.weight"].float()
    hidden = embed.shape[1]

    def proposal(prev: int, cur: int) -> int:
        state = weights["fc.weight"][:, :hidden] @ embed[prev]
        state = state + _value_through_head(weights, "midlayer.", 1, embed[cur] * NORMED)
        return int((weights["lm_head.weight"] @ state).argmax())

    assert_every_proposal_right(proposal, target_rule(target_dir), drafting_pairs(target_dir), "first proposal")


def test_mtp_layer_proposes_by_the_rule(tmp_path):
    """The MTP layer's proposal read off its weights (input_proj keeps the normed embedding of token t+1; head 0
    copies token t's second factor at its peak; the final norm does not change an argmax) is the rule's choice
    after (token t, token t+1)."""
    from spec_decode_ci.e2e.tiny_models import MTP_PREFIX

    (name, family), = [(n, f) for n, f in SMOKE.tiny_models.items() if f == "mimo"]
    target_dir = write_weights(tmp_path / name, family)
    weights = {k: v.float() for k, v in weights_of(target_dir).items()}
    embed = weights["model.embed_tokens.weight"]
    hidden = embed.shape[1]

    def proposal(prev: int, cur: int) -> int:
        state = weights[MTP_PREFIX + "input_proj.weight"][:, hidden:] @ (embed[cur] * NORMED)
        state = state + _value_through_head(weights, MTP_PREFIX, 0, embed[prev] * NORMED)
        return int((weights["lm_head.weight"] @ state).argmax())

    assert_every_proposal_right(proposal, target_rule(target_dir), drafting_pairs(target_dir), "MTP proposal")


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


@pytest.mark.parametrize("head,target", sorted(SMOKE.tiny_heads["speculators"].items()))
def test_speculators_checkpoint_loads_and_proposes_through_d2t(tmp_path, head, target):
    """vLLM reads the tiny speculators checkpoint through its speculators config path (the smoke case's engine
    arguments), its own EAGLE-3 class loads every weight (none left unset), and that model's
    first proposal (fc of the aux states plus head 1's copy of the current token's factor, logits mapped through the checkpoint's
    draft vocabulary) is the rule's choice at every drafting step of the target's run."""
    import torch

    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    (case_id,) = [c.id for c in SMOKE.all_cases() if c.speculators == head]
    config = SMOKE.with_models(write_tiny_models(tmp_path, {target: SMOKE.tiny_models[target]},
                                                 {"speculators": {head: target}}, weights=True))
    (case,) = [c for c in config.all_cases() if c.id == case_id]
    engine = cases.offline_engine_config(config, case, speculative=True)
    draft = engine.speculative_config.draft_model_config
    assert type(draft.hf_config).__name__ == "SpeculatorsConfig", type(draft.hf_config)
    assert engine.speculative_config.method == "eagle3"

    checkpoint, target_weights = weights_of(case.speculators), weights_of(case.target)
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
        attention = model.model.layers[0].self_attn  # kv head 0's value rows follow the queries' and keys'
        first_v = (HEADS + KV_HEADS) * HEAD_DIM
        value = attention.qkv_proj.weight[first_v:first_v + HEAD_DIM, :embed.shape[1]].float()
        out = attention.o_proj.weight[:, HEAD_DIM:2 * HEAD_DIM].float()  # head 1: the current token's factor
        noise = torch.randn(2 * embed.shape[1], dtype=embed.dtype)  # aux states 1 and 2 are not read

        def proposal(prev: int, cur: int) -> int:
            state = model.combine_hidden_states(torch.cat([embed[prev], noise])[None])
            state = state + (out @ (value @ (embed[cur].float() * NORMED))).to(state.dtype)
            return int(model.compute_logits(state).argmax(-1))

        assert_every_proposal_right(proposal, target_rule(case.target), drafting_pairs(case.target),
                                    "first proposal")
