"""The GPU smoke's random-weight model keeps its greedy choices through bf16 rounding, so that comparing the
speculative run with the plain one tests speculation rather than numerics."""

from __future__ import annotations

import pytest

from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.runner import prompts
from spec_decode_ci.e2e.tiny_models import write_weights

pytestmark = pytest.mark.e2e_offline
SMOKE = cases.load(str(cases.SMOKE_CONFIG_PATH))


def greedy(model_dir, dtype, token_prompts, steps):
    import json
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if json.loads((Path(model_dir) / "config.json").read_text())["model_type"] == "mimo":  # Qwen2 layers
        config = Qwen2Config.from_dict(json.loads((Path(model_dir) / "config.json").read_text()))
        model = Qwen2ForCausalLM.from_pretrained(model_dir, config=config, torch_dtype=dtype).eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).eval()
    out = []
    with torch.no_grad():
        for ids in token_prompts:
            seq = model.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
            out.append(seq[0, len(ids):].tolist())
    return out


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
    import torch
    from safetensors.torch import load_file

    from spec_decode_ci.e2e.tiny_models import EAGLE3_AUX_LAYERS, write_eagle3_weights

    assert EAGLE3_AUX_LAYERS[0] == 0, "the first aux state must be the target's input embedding"
    target_dir = write_weights(tmp_path / target, SMOKE.tiny_models[target])
    head_weights = load_file(str(write_eagle3_weights(tmp_path / head, target_dir) / "model.safetensors"))
    embed = load_file(str(target_dir / "model.safetensors"))["model.embed_tokens.weight"].float()
    hidden = embed.shape[1]
    state = embed @ head_weights["fc.weight"].float()[:, :hidden].T  # fc(aux) with aux = (embed[t], 0, 0)
    proposal = (state @ head_weights["lm_head.weight"].float().T).argmax(-1)  # token id -> first proposal
    token_prompts = [p["prompt_token_ids"] for p in prompts(SMOKE)]
    runs = [ids + out for ids, out in zip(token_prompts, greedy(target_dir, torch.bfloat16, token_prompts,
                                                                  SMOKE.max_tokens))]
    pairs = [(seq[t], seq[t + 2]) for ids, seq in zip(token_prompts, runs) for t in range(len(ids) - 1, len(seq) - 2)]
    right = sum(int(proposal[a]) == b for a, b in pairs)
    assert right == len(pairs), f"first proposal right on {right}/{len(pairs)} steps"


def successor_pairs(target_dir):
    """(token, the target's next token) at every generated step of the target's own greedy run on the prompts."""
    import torch

    token_prompts = [p["prompt_token_ids"] for p in prompts(SMOKE)]
    runs = [ids + out for ids, out in zip(token_prompts, greedy(target_dir, torch.bfloat16, token_prompts,
                                                                  SMOKE.max_tokens))]
    return [(seq[t], seq[t + 1]) for ids, seq in zip(token_prompts, runs) for t in range(len(ids) - 1, len(seq) - 1)]


def test_mtp_layer_proposes_the_targets_next_token(tmp_path):
    """The MTP layer's proposal read off its weights (input_proj keeps the token embedding; the damped layer
    left out; the final norm does not change an argmax) is, for token t+1, the target's own next token."""
    import torch
    from safetensors.torch import load_file

    from spec_decode_ci.e2e.tiny_models import MTP_PREFIX

    (name, family), = [(n, f) for n, f in SMOKE.tiny_models.items() if f == "mimo"]
    target_dir = write_weights(tmp_path / name, family)
    weights = load_file(str(target_dir / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"].float()
    hidden = embed.shape[1]
    state = embed @ weights[MTP_PREFIX + "input_proj.weight"].float()[:, hidden:].T  # (0, embed[t+1]) in
    proposal = (state @ weights["lm_head.weight"].float().T).argmax(-1)
    pairs = successor_pairs(target_dir)
    right = sum(int(proposal[a]) == b for a, b in pairs)
    assert right == len(pairs), f"MTP proposal right on {right}/{len(pairs)} steps"


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
    pairs = successor_pairs(target_dir)
    right = sum(int(proposal[a]) == b for a, b in pairs)
    assert right == len(pairs), f"EAGLE-1 proposal right on {right}/{len(pairs)} steps"
