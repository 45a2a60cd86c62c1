"""Tiny local stand-ins for the e2e checkpoints: the same config.json structure, a few hundred parameters.

The offline tier writes only configs (vLLM's engine configuration never reads weights); the GPU smoke
also writes random weights with transformers (``write_weights``), so vLLM can load and run them.
"""

from __future__ import annotations

import json
from pathlib import Path

from spec_decode_ci.tiny_configs import (
    _FAMILIES, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, LAYERS, VOCAB, base_config, write_config, write_target,
)


def write_eagle3_head(directory: Path, max_len: int = 4096, aux_layer_ids: list[int] | None = None) -> Path:
    """EAGLE-3 heads (yuhuili, AngelSlim) are one Llama decoder layer reading the target's hidden states.

    ``aux_layer_ids`` names the target layers whose inputs the head reads (vLLM's default, layers 2, L/2 and
    L-3, needs a deeper target than the tiny ones)."""
    extra = {"eagle_aux_hidden_state_layer_ids": aux_layer_ids} if aux_layer_ids else {}
    return write_config(directory, {**base_config(max_len), "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
                              "num_hidden_layers": 1, "draft_vocab_size": VOCAB, "target_hidden_size": HIDDEN,
                              **extra})


def write_eagle1_head(directory: Path, max_len: int = 4096) -> Path:
    """yuhuili's EAGLE-1 heads are saved as a one-layer ``LlamaForCausalLM``."""
    return write_config(directory, {**base_config(max_len), **_FAMILIES["llama"], "num_hidden_layers": 1})


def write_speculators(directory: Path, verifier: Path, family: str, num_speculative_tokens: int,
                      max_len: int = 4096, draft_vocab_size: int = VOCAB,
                      aux_layer_ids: list[int] | None = None) -> Path:
    """A speculators-format EAGLE-3 checkpoint's config.json whose verifier is ``verifier``.

    ``aux_layer_ids`` go in the layer config, where every vLLM release with the speculators path reads them
    (later ones also copy a top-level key there)."""
    layer = {**base_config(max_len), "model_type": family if family in ("llama", "qwen3") else "llama",
             "num_hidden_layers": 1, "hidden_act": "silu",
             **({"eagle_aux_hidden_state_layer_ids": aux_layer_ids} if aux_layer_ids else {})}
    return write_config(directory, {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
        "transformer_layer_config": layer, "draft_vocab_size": draft_vocab_size, "norm_before_residual": True,
        "target_hidden_size": HIDDEN,
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": num_speculative_tokens}],
            "verifier": {"name_or_path": str(verifier), "architectures": _FAMILIES[family]["architectures"]},
        },
    })


def write_weights(directory: Path, family: str, seed: int = 0, max_len: int = 4096) -> Path:
    """A tiny target with random weights (GPU smoke): config from ``write_target``, weights from transformers.

    Plain random weights give greedy choices so close that bf16 rounding flips them (measured on CPU: greedy
    continuations in fp32 and bf16 differ on 6 of 6 prompts), so equality with the plain run would test
    numerics, not speculation. Here each layer's output projections are damped (x0.1) and the LM head is the
    embedding matrix in a fixed permutation: the next token is mostly decided by the current one, with a wide
    margin, while attention and the KV cache still take part in every step.

    A ``mimo`` target (Qwen2 layers) also gets its MTP layer (``mtp_layer_weights``)."""
    import torch

    write_target(directory, family, max_len)
    torch.manual_seed(seed)
    model = _transformers_model(directory, family)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.1)
            layer.mlp.down_proj.weight.mul_(0.1)
        embed = model.model.embed_tokens.weight
        model.lm_head.weight.copy_(embed[torch.randperm(embed.shape[0])])
    weights = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    if family == "mimo":
        weights.update(mtp_layer_weights(weights))
    # the config written above stays: transformers would name a MiMo target Qwen2ForCausalLM
    return _save_bf16(weights, directory)


def _transformers_model(directory: Path, family: str):
    """The family's transformers model for the config in ``directory`` (MiMo's layers are Qwen2's)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if family == "mimo":
        config = Qwen2Config.from_dict(json.loads((directory / "config.json").read_text()))
        return Qwen2ForCausalLM(config).to(torch.float32)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory), torch_dtype=torch.float32)


MTP_PREFIX = "model.mtp_layers.0."


def mtp_layer_weights(target: dict[str, "torch.Tensor"]) -> dict[str, "torch.Tensor"]:
    """MiMo's MTP layer for a ``write_weights`` target, built so that its proposal is the target's next token.

    vLLM runs it on the target's hidden state at position t and the embedding of token t+1:
    ``input_proj(concat(hidden_norm(h_t), token_norm(embed[t+1])))`` through one Qwen2 decoder layer, a final
    norm and the target's LM head, and asks for token t+2. Here ``input_proj`` keeps only the embedding half and
    the decoder layer is a copy of the target's last (damped) layer, so the state is embed[t+1] plus a small
    attention and MLP term and the LM head (the permuted embeddings) picks the target's own successor of
    token t+1: every proposal is right by construction, while the layer still reads the drafter's KV cache."""
    import torch

    hidden = target["model.embed_tokens.weight"].shape[1]
    last = max(int(k.split(".")[2]) for k in target if k.startswith("model.layers."))
    block = {k[len(f"model.layers.{last}."):]: v.clone() for k, v in target.items()
             if k.startswith(f"model.layers.{last}.")}
    ones = torch.ones(hidden, dtype=torch.bfloat16)
    return {
        **{MTP_PREFIX + k: v for k, v in block.items()},
        MTP_PREFIX + "token_layernorm.weight": ones, MTP_PREFIX + "hidden_layernorm.weight": ones.clone(),
        MTP_PREFIX + "final_layernorm.weight": ones.clone(),
        MTP_PREFIX + "input_proj.weight": torch.cat([torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1)
        .to(torch.bfloat16),
    }


def lm_head_permutation(weights: dict[str, "torch.Tensor"]) -> "torch.Tensor":
    """``perm`` with ``lm_head[v] == embed_tokens[perm[v]]`` in a target's weights from ``write_weights``: its
    greedy next token after ``t`` is meant to be ``perm.argsort()[t]`` (test_tiny_models checks the two-step
    consequence the EAGLE-3 head relies on)."""
    import torch

    embed, head = weights["model.embed_tokens.weight"], weights["lm_head.weight"]
    row_of = {row.view(torch.int16).numpy().tobytes(): i for i, row in enumerate(embed)}
    return torch.tensor([row_of[row.view(torch.int16).numpy().tobytes()] for row in head])


EAGLE3_AUX_LAYERS = [0, 1, LAYERS]  # the embeddings first: the head's first proposal reads them


def write_eagle3_weights(directory: Path, target_dir: Path, seed: int = 0, max_len: int = 4096) -> Path:
    """A random-weight EAGLE-3 head for a ``write_weights`` target whose first proposal is usually right.

    vLLM feeds the head ``fc(concat(aux states))`` of the target at position t, plus the token at t+1, and asks
    for token t+2. Here ``fc`` keeps only the first aux state (the target's input embedding of token t), the
    decoder layer's output projections are damped as in the target, the head's own LM head is the target's
    taken two permutation steps ahead, and its embeddings are shared with the target (none in the checkpoint).
    So the first proposal is the target's choice two tokens on; later proposals of a drafting step start from
    the head's own state and are mostly rejected. The attention weights are random: the layer still runs on
    the drafter's KV cache and FlashInfer metadata in every step."""
    from safetensors.torch import load_file

    write_eagle3_head(directory, max_len, aux_layer_ids=EAGLE3_AUX_LAYERS)
    target = load_file(str(target_dir / "model.safetensors"))
    return _save_bf16(_eagle3_weights(target, seed, "midlayer."), directory)


def _eagle3_weights(target: dict[str, "torch.Tensor"], seed: int, layer_prefix: str) -> dict[str, "torch.Tensor"]:
    """The EAGLE-3 head of ``write_eagle3_weights`` for a target's weights, its decoder layer under
    ``layer_prefix``."""
    import torch

    target_head, perm = target["lm_head.weight"], lm_head_permutation(target)
    return {
        layer_prefix + "input_layernorm.weight": torch.ones(HIDDEN),
        layer_prefix + "hidden_norm.weight": torch.ones(HIDDEN),
        # q, k, v read concat(embedding, hidden state): twice the hidden size
        **_random_decoder_layer(layer_prefix, seed, attention_input=2 * HIDDEN),
        "fc.weight": torch.cat([torch.eye(HIDDEN), torch.zeros(HIDDEN, 2 * HIDDEN)], dim=1),
        "norm.weight": torch.ones(HIDDEN),
        # row v must score highest on embed[t] where v is two steps on from t: perm[perm[v]] == t
        "lm_head.weight": target_head.float()[perm],
    }


# The tiny speculators checkpoint's draft vocabulary leaves this token out (the target never needs it as a first
# proposal on the smoke prompts: test_tiny_models checks), so vLLM maps every draft id through ``d2t``.
SPECULATORS_LEFT_OUT_TOKEN = 0


def write_speculators_head(directory: Path, verifier: Path, family: str, num_speculative_tokens: int,
                           max_len: int = 4096) -> Path:
    """The config.json of ``write_speculators_weights``'s checkpoint: a draft vocabulary one token short of the
    target's, reading the aux states the EAGLE-3 construction needs."""
    return write_speculators(directory, verifier, family, num_speculative_tokens, max_len,
                             draft_vocab_size=VOCAB - 1, aux_layer_ids=EAGLE3_AUX_LAYERS)


def write_speculators_weights(directory: Path, target_dir: Path, family: str, num_speculative_tokens: int,
                              seed: int = 0, max_len: int = 4096) -> Path:
    """A speculators-format EAGLE-3 checkpoint for a ``write_weights`` target, in the layout the speculators
    library saves: decoder layer ``layers.0``, its own ``embed_tokens`` (the target's), and a draft vocabulary
    smaller than the target's with ``d2t`` (draft id -> target id offset) and ``t2d`` (target ids drafted).

    The head is ``write_eagle3_weights``'s construction (first proposal = the target's choice two tokens on);
    its draft vocabulary is every target token but ``SPECULATORS_LEFT_OUT_TOKEN``, in a random order, so a
    proposal is right only through vLLM's draft-to-target mapping."""
    import torch
    from safetensors.torch import load_file

    write_speculators_head(directory, target_dir, family, num_speculative_tokens, max_len)
    target = load_file(str(target_dir / "model.safetensors"))
    weights = _eagle3_weights(target, seed, "layers.0.")
    order = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(seed))
    drafted = order[order != SPECULATORS_LEFT_OUT_TOKEN]  # draft id -> target id
    weights["lm_head.weight"] = weights["lm_head.weight"][drafted]
    weights["embed_tokens.weight"] = target["model.embed_tokens.weight"]
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[drafted] = True
    extra = {"d2t": drafted - torch.arange(VOCAB - 1), "t2d": t2d}
    return _save_bf16(weights, directory, exact=extra)


def write_eagle1_weights(directory: Path, target_dir: Path, seed: int = 0, max_len: int = 4096) -> Path:
    """A random-weight EAGLE-1 head for a ``write_weights`` target whose every proposal is the target's choice.

    vLLM's EAGLE-1 runs ``fc(concat(embed[t+1], h_t))`` through one Llama decoder layer (no input norm) and the
    target's LM head (the head ships neither LM head nor embeddings), and asks for token t+2. Here ``fc`` keeps
    only the embedding and the layer's output projections are damped, so the state is embed[t+1] plus a small
    term and the target's LM head picks the target's successor of t+1. Later proposals of a drafting step read
    the head's own state and the embedding of its last proposal, so they are right as well: all k by
    construction. The attention weights are random: the layer still runs on the drafter's KV cache."""
    import torch

    write_eagle1_head(directory, max_len)
    weights = {
        **_random_decoder_layer("layers.0.", seed, attention_input=HIDDEN),  # its input norm is vLLM's identity
        "fc.weight": torch.cat([torch.eye(HIDDEN), torch.zeros(HIDDEN, HIDDEN)], dim=1),
    }
    return _save_bf16(weights, directory)


def _random_decoder_layer(prefix: str, seed: int, attention_input: int) -> dict[str, "torch.Tensor"]:
    """A drafter's Llama decoder layer (no input norm): random attention and MLP, output projections damped
    (x0.1) as in the target."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02 * scale

    q_out, kv_out, inter = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, 2 * HIDDEN
    return {
        prefix + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        prefix + "self_attn.q_proj.weight": normal(q_out, attention_input),
        prefix + "self_attn.k_proj.weight": normal(kv_out, attention_input),
        prefix + "self_attn.v_proj.weight": normal(kv_out, attention_input),
        prefix + "self_attn.o_proj.weight": normal(HIDDEN, q_out, scale=0.1),
        prefix + "mlp.gate_proj.weight": normal(inter, HIDDEN),
        prefix + "mlp.up_proj.weight": normal(inter, HIDDEN),
        prefix + "mlp.down_proj.weight": normal(HIDDEN, inter, scale=0.1),
    }


def _save_bf16(weights: dict[str, "torch.Tensor"], directory: Path,
               exact: dict[str, "torch.Tensor"] | None = None) -> Path:
    """``weights`` in bf16 and ``exact`` (index tensors) as they are, in one model.safetensors."""
    import torch
    from safetensors.torch import save_file

    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}
    save_file({**tensors, **{k: v.contiguous() for k, v in (exact or {}).items()}},
              str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


SPECULATORS_TOKENS = 3  # the proposal count a tiny speculators checkpoint names (a case may set its own)

# kind -> (head with weights, config only); each takes (directory, its target's directory, the target's family)
HEAD_WRITERS = {
    "eagle3": (lambda d, target, family: write_eagle3_weights(d, target),
               lambda d, target, family: write_eagle3_head(d, aux_layer_ids=EAGLE3_AUX_LAYERS)),
    "eagle1": (lambda d, target, family: write_eagle1_weights(d, target),
               lambda d, target, family: write_eagle1_head(d)),
    "speculators": (lambda d, target, family: write_speculators_weights(d, target, family, SPECULATORS_TOKENS),
                    lambda d, target, family: write_speculators_head(d, target, family, SPECULATORS_TOKENS)),
}


def write_tiny_models(root: Path, targets: dict[str, str], heads: dict[str, dict[str, str]],
                      weights: bool) -> dict[str, str]:
    """Writes a suite configuration's tiny models under ``root``: name -> directory.

    ``targets`` maps a name to a family; ``heads`` maps a kind of ``HEAD_WRITERS`` to {head name: its target's
    name}. Without ``weights`` only the configs are written (vLLM's engine configuration never reads weights)."""
    written = {name: write_weights(root / name, family) if weights else write_target(root / name, family)
               for name, family in targets.items()}
    for kind, named in heads.items():
        write = HEAD_WRITERS[kind][0 if weights else 1]
        for name, target in named.items():
            written[name] = write(root / name, written[target], targets[target])
    return {name: str(path) for name, path in written.items()}
