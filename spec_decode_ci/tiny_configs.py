"""Tiny model configs (config.json, no weights) that both tiers build vLLM's configuration from: the build-path
tier's builders (a one-layer Llama of the builder options' attention shape, a DeepSeek-V3-style MLA model with
MTP) and the e2e tier's tiny stand-ins for its checkpoints (``spec_decode_ci.e2e.tiny_models``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, LAYERS = 256, 4, 2, 64, 1024, 2
# RoPE's base: frequencies from 1 down to 0.67 rad, so that the tiny e2e models' attention can peak at one distance
# (no other distance within 1100 positions scores as high; spec_decode_ci.e2e.tiny_models)
ROPE_THETA = 1.5

_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
    # MiMo ships its config class as remote code (auto_map), like the real checkpoint.
    "mimo": {"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "num_nextn_predict_layers": 1,
             "auto_map": {"AutoConfig": "configuration_mimo.MiMoConfig"}},
}
FAMILIES = tuple(_FAMILIES)

_MIMO_CONFIG_CODE = '''from transformers import Qwen2Config


class MiMoConfig(Qwen2Config):
    model_type = "mimo"

    def __init__(self, *args, num_nextn_predict_layers=0, **kwargs):
        self.num_nextn_predict_layers = num_nextn_predict_layers
        super().__init__(*args, **kwargs)
'''


def base_config(max_len: int, heads: int = HEADS, kv_heads: int = KV_HEADS, head_dim: int = HEAD_DIM,
          layers: int = LAYERS) -> dict[str, Any]:
    hidden = heads * head_dim
    return {"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": layers, "vocab_size": VOCAB,
            "max_position_embeddings": max_len, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
            "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "rope_theta": ROPE_THETA}


def write_config(directory: Path, config: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    return directory


def write_target(directory: Path, family: str, max_len: int = 4096, **shape: int) -> Path:
    """A target's config.json; ``shape`` overrides heads, kv_heads, head_dim or layers (the build-path tier's
    builder options)."""
    path = write_config(directory, {**base_config(max_len, **shape), **_FAMILIES[family]})
    if family == "mimo":
        (directory / "configuration_mimo.py").write_text(_MIMO_CONFIG_CODE)
    return path


def write_mla_target(directory: Path, max_len: int = 4096, heads: int = 16, kv_lora_rank: int = 512,
                     qk_nope_head_dim: int = 128, qk_rope_head_dim: int = 64, v_head_dim: int = 128,
                     mtp_layers: int = 1) -> Path:
    """A DeepSeek-V3-style target (MLA attention, one dense layer, ``mtp_layers`` MTP layers), DeepSeek-V3's
    latent dimensions by default: the attention vLLM's MLA builders and the MTP drafter see."""
    return write_config(directory, {
        **base_config(max_len, heads=heads, kv_heads=heads, head_dim=qk_nope_head_dim + qk_rope_head_dim, layers=1),
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": HIDDEN,
        "first_k_dense_replace": 1, "moe_intermediate_size": 64, "n_routed_experts": 4, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "q_lora_rank": None, "kv_lora_rank": kv_lora_rank,
        "qk_nope_head_dim": qk_nope_head_dim, "qk_rope_head_dim": qk_rope_head_dim, "v_head_dim": v_head_dim,
        "num_nextn_predict_layers": mtp_layers,
    })
