"""Tiny local stand-ins for the e2e checkpoints: the same config.json structure, a few hundred parameters.

The offline tier writes only configs (vLLM's engine configuration never reads weights); the GPU smoke
also writes weights built by hand (``write_weights`` and the heads' writers), so vLLM can load and run them and
every greedy choice and proposal is known from the weights (the rule, see ``FACTOR``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from spec_decode_ci.tiny_configs import (
    _FAMILIES, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, LAYERS, ROPE_THETA, VOCAB, base_config, write_config, write_target,
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


# The smoke's tiny models follow one rule by construction: token t is a pair of factors (a, b) = divmod(t, FACTOR),
# and the target's greedy token after (..., prev, cur) is (A_NEXT[a of cur], B_NEXT[b of prev]): its first factor
# follows the current token, its second the previous one. The previous token reaches the current position only
# through attention: a head whose RoPE scores peak at distance one (position-sensitive by construction). The
# hidden state holds separate blocks, so each factor's argmax is decided alone, with a margin of a whole unit:
#   CONST: a constant 1 (queries and keys read it), U: one-hot of a, W: one-hot of b, Z: one-hot of the previous
#   token's b, written by the head.
FACTOR = 32
CONST, U, W, Z = 0, 1, 1 + FACTOR, 1 + 2 * FACTOR
SCORE = 40.0  # the peak's attention logit over mean cos; any other distance scores >= 0.31 * SCORE lower
assert VOCAB == FACTOR * FACTOR and Z + FACTOR <= HIDDEN and HEAD_DIM >= 2 * FACTOR


def factors(token: int) -> tuple[int, int]:
    return divmod(token, FACTOR)


def _permutations(seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(FACTOR, generator=gen), torch.randperm(FACTOR, generator=gen)


def rule_from_lm_head(lm_head: "torch.Tensor", draft_to_target: "torch.Tensor | None" = None):
    """The greedy rule read off an LM head of this construction: a function (prev, cur) -> next token.

    Row v (target id ``draft_to_target[v]`` where the head has a draft vocabulary) holds one unit in U at the
    first factor it answers to and one in Z at the previous token's second factor it answers to."""
    rows = lm_head.float()
    ids = draft_to_target.tolist() if draft_to_target is not None else list(range(rows.shape[0]))
    by_pair = {(int(rows[i, U:U + FACTOR].argmax()), int(rows[i, Z:Z + FACTOR].argmax())): t
               for i, t in enumerate(ids)}

    def rule(prev: int, cur: int) -> int | None:
        return by_pair.get((factors(cur)[0], factors(prev)[1]))
    return rule


def weights_of(model_dir: "Path | str") -> dict[str, "torch.Tensor"]:
    """The weights of a tiny model written here (its one model.safetensors)."""
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def target_rule(target_dir: "Path | str"):
    """The greedy rule of a ``write_weights`` target, read off its LM head."""
    return rule_from_lm_head(weights_of(target_dir)["lm_head.weight"])


def continuation(rule, prompt: list[int], steps: int) -> list[int]:
    """``steps`` tokens after ``prompt`` by ``rule`` (the first token's previous token is itself)."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(rule(seq[-2] if len(seq) > 1 else seq[-1], seq[-1]))
    return seq[len(prompt):]


def _embeddings() -> "torch.Tensor":
    import torch

    embed = torch.zeros(VOCAB, HIDDEN)
    tokens = torch.arange(VOCAB)
    embed[:, CONST] = 1.0
    embed[tokens, U + tokens // FACTOR] = 1.0
    embed[tokens, W + tokens % FACTOR] = 1.0
    return embed


def _lm_head(seed: int) -> "torch.Tensor":
    """Row v = (a', b') answers to first factor A[a'] of the current token and second factor B[b'] of the
    previous one (A, B: random permutations)."""
    import torch

    first, second = _permutations(seed)
    head = torch.zeros(VOCAB, HIDDEN)
    tokens = torch.arange(VOCAB)
    head[tokens, U + first[tokens // FACTOR]] = 1.0
    head[tokens, Z + second[tokens % FACTOR]] = 1.0
    return head


def _rope_query_key(peak: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    """A query and a key (HEAD_DIM each, RoPE's neox halves) for a constant input of 1, such that after RoPE at
    positions m and n the attention logit q.k / sqrt(HEAD_DIM) is SCORE * mean_i cos((m - n - peak) theta_i)."""
    import math

    import torch

    theta = ROPE_THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    amplitude = math.sqrt(SCORE * math.sqrt(HEAD_DIM) / (HEAD_DIM // 2))
    query = torch.cat([torch.cos(peak * theta), -torch.sin(peak * theta)]) * amplitude
    key = torch.cat([torch.ones_like(theta), torch.zeros_like(theta)]) * amplitude
    return query.float(), key.float()


def attention_layer(prefix: str, scale_in: float, previous_gain: float = 0.0, current_gain: float = 0.0,
                    input_size: int = HIDDEN) -> dict[str, "torch.Tensor"]:
    """A decoder layer whose attention copies the previous token's second factor into Z (head 0: peak at
    distance 1, ``previous_gain``) and the current token's first factor into U (head 1: peak at distance 0,
    ``current_gain``); its MLP adds nothing. ``scale_in`` is the value the layer's attention input holds at
    CONST and at each one-hot (1 raw, 1/rms after a norm); the first HIDDEN columns of the input are read."""
    import torch

    q_proj, k_proj = torch.zeros(HEADS * HEAD_DIM, input_size), torch.zeros(KV_HEADS * HEAD_DIM, input_size)
    v_proj, o_proj = torch.zeros(KV_HEADS * HEAD_DIM, input_size), torch.zeros(HIDDEN, HEADS * HEAD_DIM)
    for head, peak in ((0, 1), (1, 0)):  # both read kv head 0
        q_proj[head * HEAD_DIM:(head + 1) * HEAD_DIM, CONST] = _rope_query_key(peak)[0] / scale_in
    k_proj[:HEAD_DIM, CONST] = _rope_query_key(0)[1] / scale_in
    factor = torch.arange(FACTOR)
    v_proj[factor, W + factor] = 1.0 / scale_in  # value dims 0..31: the token's second factor
    v_proj[FACTOR + factor, U + factor] = 1.0 / scale_in  # value dims 32..63: its first factor
    o_proj[Z + factor, factor] = previous_gain  # head 0's second factor -> Z
    o_proj[U + factor, HEAD_DIM + FACTOR + factor] = current_gain  # head 1's first factor -> U
    inter = 2 * HIDDEN
    return {
        prefix + "input_layernorm.weight": torch.ones(HIDDEN),
        prefix + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        prefix + "self_attn.q_proj.weight": q_proj, prefix + "self_attn.k_proj.weight": k_proj,
        prefix + "self_attn.v_proj.weight": v_proj, prefix + "self_attn.o_proj.weight": o_proj,
        prefix + "mlp.gate_proj.weight": torch.zeros(inter, HIDDEN), prefix + "mlp.up_proj.weight": torch.zeros(inter, HIDDEN),
        prefix + "mlp.down_proj.weight": torch.zeros(HIDDEN, inter),
    }


NORMED = (HIDDEN / 3) ** 0.5  # a token's embedding after an RMS norm: CONST and two one-hots of 1 -> this each


def write_weights(directory: Path, family: str, seed: int = 0, max_len: int = 4096) -> Path:
    """A tiny target whose greedy choice is the construction's rule (see FACTOR): the embeddings and LM head of
    the construction, layer 0 the previous-token head, every later layer adding nothing. A ``mimo`` target
    (Qwen2 layers) also gets its MTP layer (``mtp_layer_weights``). Config from ``write_target``, with
    ``ROPE_THETA`` (tiny_configs)."""
    import torch

    write_target(directory, family, max_len)
    model = _transformers_model(directory, family)
    weights = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    weights.update({k: torch.ones_like(v) for k, v in weights.items() if k.endswith("norm.weight")})
    weights["model.embed_tokens.weight"] = _embeddings()
    weights["lm_head.weight"] = _lm_head(seed)
    # layer 0 reads the normed embedding; its residual is the raw one (units of 1)
    weights.update(attention_layer("model.layers.0.", NORMED, previous_gain=1.0))
    if family == "mimo":
        weights.update(mtp_layer_weights())
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


def mtp_layer_weights() -> dict[str, "torch.Tensor"]:
    """MiMo's MTP layer for a ``write_weights`` target, built so that its proposal is the target's next token.

    vLLM runs it on the target's hidden state at position t and the embedding of token t+1:
    ``input_proj(concat(hidden_norm(h_t), token_norm(embed[t+1])))`` through one Qwen2 decoder layer, a final
    norm and the target's LM head, and asks for token t+2. Here ``input_proj`` keeps only the (normed) embedding
    and the layer is the construction's previous-token head over the MTP layer's own KV cache, where position t
    holds token t+1: the proposal is the rule's choice after (token t, token t+1), right by construction, and
    only if the layer's positions and KV slots are right."""
    import torch

    ones = torch.ones(HIDDEN)
    block = attention_layer(MTP_PREFIX, NORMED, previous_gain=NORMED)  # its residual is the normed embedding
    biases = {MTP_PREFIX + f"self_attn.{p}_proj.bias": torch.zeros(n) for p, n in
              (("q", HEADS * HEAD_DIM), ("k", KV_HEADS * HEAD_DIM), ("v", KV_HEADS * HEAD_DIM))}
    return {
        **block, **biases,
        MTP_PREFIX + "token_layernorm.weight": ones, MTP_PREFIX + "hidden_layernorm.weight": ones.clone(),
        MTP_PREFIX + "final_layernorm.weight": ones.clone(),
        MTP_PREFIX + "input_proj.weight": torch.cat([torch.zeros(HIDDEN, HIDDEN), torch.eye(HIDDEN)], dim=1),
    }


EAGLE3_AUX_LAYERS = [0, 1, LAYERS]  # the embeddings first: the head's first proposal reads them


def write_eagle3_weights(directory: Path, target_dir: Path, max_len: int = 4096) -> Path:
    """An EAGLE-3 head for a ``write_weights`` target whose first proposal of each step is right by construction.

    vLLM feeds the head ``fc(concat(aux states))`` of the target at position t, plus the token at t+1, and asks
    for token t+2, the rule's choice after (token t, token t+1). Here ``fc`` writes the second factor of the first
    aux state (the target's input embedding of token t) into Z: only the target's hidden state of the right
    position gives it. The decoder layer's head 1 (peak at distance 0, over the head's own KV cache) copies the
    first factor of token t+1 into U; the LM head is the target's. Later proposals of a step start from the
    head's own state and are mostly rejected. The embeddings are shared with the target (none in the checkpoint)."""
    write_eagle3_head(directory, max_len, aux_layer_ids=EAGLE3_AUX_LAYERS)
    return _save_bf16(_eagle3_weights(weights_of(target_dir), "midlayer."), directory)


def _eagle3_weights(target: dict[str, "torch.Tensor"], layer_prefix: str) -> dict[str, "torch.Tensor"]:
    """The EAGLE-3 head of ``write_eagle3_weights`` for a target's weights, its decoder layer under
    ``layer_prefix``."""
    import torch

    fc = torch.zeros(HIDDEN, 3 * HIDDEN)
    factor = torch.arange(FACTOR)
    fc[Z + factor, W + factor] = 1.0  # aux state 0 (embedding of token t): its second factor -> Z
    # q, k, v read concat(normed embedding of token t+1, normed hidden state): the first half only
    layer = attention_layer(layer_prefix, NORMED, current_gain=1.0, input_size=2 * HIDDEN)
    return {**layer, layer_prefix + "hidden_norm.weight": torch.ones(HIDDEN), "fc.weight": fc,
            "norm.weight": torch.ones(HIDDEN), "lm_head.weight": target["lm_head.weight"].float()}


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

    write_speculators_head(directory, target_dir, family, num_speculative_tokens, max_len)
    target = weights_of(target_dir)
    weights = _eagle3_weights(target, "layers.0.")
    order = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(seed))
    drafted = order[order != SPECULATORS_LEFT_OUT_TOKEN]  # draft id -> target id
    weights["lm_head.weight"] = weights["lm_head.weight"][drafted]
    weights["embed_tokens.weight"] = target["model.embed_tokens.weight"]
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[drafted] = True
    extra = {"d2t": drafted - torch.arange(VOCAB - 1), "t2d": t2d}
    return _save_bf16(weights, directory, exact=extra)


def write_eagle1_weights(directory: Path, max_len: int = 4096) -> Path:
    """An EAGLE-1 head for a ``write_weights`` target whose every proposal is the target's choice by construction.

    vLLM's EAGLE-1 runs ``fc(concat(embed[t+1], h_t))`` through one Llama decoder layer (no input norm) and the
    target's LM head, and asks for token t+2. Here ``fc`` keeps only the embedding, and the layer is the
    construction's previous-token head over the head's own KV cache, where position t holds token t+1: each
    proposal is the rule's choice after (token t, token t+1), the later ones of a step included, as long as the
    drafter's positions and KV slots are right (a position off by one in a later proposal reads the wrong
    token's factor)."""
    import torch

    write_eagle1_head(directory, max_len)
    weights = {
        **attention_layer("layers.0.", 1.0, previous_gain=1.0),  # its input norm is vLLM's identity: raw units
        "fc.weight": torch.cat([torch.eye(HIDDEN), torch.zeros(HIDDEN, HIDDEN)], dim=1),
    }
    del weights["layers.0.input_layernorm.weight"]
    return _save_bf16(weights, directory)


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

@dataclass(frozen=True)
class HeadKind:
    """A kind of tiny drafter: the section of the cases file that names its heads, and its writers (weights and
    config; config only), each (directory, its target's directory, the target's family) -> the directory."""

    section: str
    what: str
    weights: Callable[[Path, Path, str], Path]
    config: Callable[[Path, Path, str], Path]


HEAD_WRITERS = {
    "eagle3": HeadKind("tiny_eagle3_heads", "tiny EAGLE-3 heads by name",
                       lambda d, target, family: write_eagle3_weights(d, target),
                       lambda d, target, family: write_eagle3_head(d, aux_layer_ids=EAGLE3_AUX_LAYERS)),
    "eagle1": HeadKind("tiny_eagle1_heads", "tiny EAGLE-1 heads by name",
                       lambda d, target, family: write_eagle1_weights(d),
                       lambda d, target, family: write_eagle1_head(d)),
    "speculators": HeadKind("tiny_speculators", "tiny speculators-format checkpoints by name",
                            lambda d, target, family: write_speculators_weights(d, target, family, SPECULATORS_TOKENS),
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
        write = HEAD_WRITERS[kind].weights if weights else HEAD_WRITERS[kind].config
        for name, target in named.items():
            written[name] = write(root / name, written[target], targets[target])
    return {name: str(path) for name, path in written.items()}
