"""Builder factory: vLLM's real ``FlashInferMetadataBuilder`` on a real ``VllmConfig`` and ``FullAttentionSpec``.

The config comes from ``EngineArgs.create_engine_config()`` on a tiny local HF ``config.json`` (no download,
no tokenizer), with a draft-model speculative config when ``num_spec_tokens > 0`` so that the builder's
spec-decode settings (reorder threshold 1 + k) are vLLM's own.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator
from unittest import mock

import torch

from spec_decode_ci import compat
from spec_decode_ci.tiny_configs import write_target
from spec_decode_ci.buildpath.options import SpecDecodeOptions
from spec_decode_ci.buildpath.run import builder_device
from spec_decode_ci.emulation import BLACKWELL, EmulatedGpu, emulated_platform

LAYER_NAME = "model.layers.0.self_attn.attn"
OTHER_LAYER_NAME = "model.layers.1.self_attn.attn"


@dataclass(frozen=True)
class BuilderOptions(SpecDecodeOptions):
    page_size: int = 16
    num_heads: int = 8
    num_kv_heads: int = 2
    head_size: int = 64
    kv_cache_layout: str = "HND"  # TRTLLM kernels read HND
    # Decode context parallel: this builder is rank ``dcp_rank`` of ``dcp_world_size`` (1: no DCP), emulated at
    # the process-group boundary.
    dcp_world_size: int = 1
    dcp_rank: int = 0
    # The attention layer's own parameters (the per-layer values the builder reads): a sliding window (-1: none)
    # and a logits soft cap (None: none).
    window_left: int = -1
    logits_soft_cap: float | None = None
    # A second attention layer's (window_left, logits_soft_cap), as a model whose layers differ gives the builder
    # (sliding-window layers beside full ones); None: the model has one layer.
    other_layer: tuple[int, float | None] | None = None
    # The KV cache's dtype as vLLM's --kv-cache-dtype names it ("auto": the model's); whether the query is
    # quantized to match an FP8 cache (vLLM's default; off: --attention-config.disable_flashinfer_q_quantization);
    # whether TRTLLM attention is asked for (--attention-config.use_trtllm_attention; off: vLLM decides).
    kv_cache_dtype: str = "auto"
    quantize_query: bool = True
    force_trtllm: bool = False
    # The model's attention is non-causal, as a DFlash drafter's is (--attention-config.use_non_causal).
    non_causal: bool = False
    # Adaptive verification (the speculative config's enable_adaptive_verification, DSpark's): drafts may be
    # trimmed on the device, so TRTLLM-gen decode reads each request's query offsets from the device.
    adaptive_verification: bool = False


def make_vllm_config(options: BuilderOptions):
    """vLLM's config for a one-layer tiny Llama of the options' attention shape (the model directory is only
    read while the config is made); one per DCP group, whatever the rank."""
    return _vllm_config(dataclasses.replace(options, dcp_rank=0))


@lru_cache(maxsize=None)
def _vllm_config(options: BuilderOptions):
    from spec_decode_ci.model_info import engine_config

    with tempfile.TemporaryDirectory(prefix="spec-decode-ci-tiny-") as base, emulated_platform(BLACKWELL):
        model_dir = write_target(Path(base) / "tiny-llama", "llama", options.max_model_len, heads=options.num_heads,
                                 kv_heads=options.num_kv_heads, head_dim=options.head_size, layers=1)
        speculation = {"method": "draft_model", "model": str(model_dir)}
        kwargs = options.engine_kwargs(model_dir, options.page_size, speculation)
        if options.kv_cache_dtype != "auto":
            kwargs["kv_cache_dtype"] = options.kv_cache_dtype
        attention_config = {"disable_flashinfer_q_quantization": True} if not options.quantize_query else {}
        if options.force_trtllm:
            attention_config["use_trtllm_attention"] = True
        if options.non_causal:
            attention_config["use_non_causal"] = True
        if attention_config:
            kwargs["attention_config"] = attention_config
        config = engine_config("build_path", **kwargs)
    compat.set_kv_cache_layout(config, options.kv_cache_layout)  # the engine core would resolve it; none here
    if options.adaptive_verification:
        # Set on the resolved config: the builder reads only this flag, and the drafter (DSpark) that asks for it
        # needs weights the tiny model has none of.
        compat.enable_adaptive_verification(config)
    config.parallel_config.decode_context_parallel_size = options.dcp_world_size  # TP stays 1: no group to split
    return config


@contextmanager
def builder_context(vllm_config, gpu: EmulatedGpu, module=None, options: BuilderOptions | None = None
                    ) -> Iterator[None]:
    """What ``build()`` runs under: the emulated platform, vLLM's current config and, with DCP, the rank's
    process group."""
    from vllm.config import set_current_vllm_config

    with ExitStack() as stack:
        stack.enter_context(emulated_platform(gpu, extra_modules=(module,) if module is not None else ()))
        stack.enter_context(set_current_vllm_config(vllm_config))
        if options is not None and options.dcp_world_size > 1:
            if module is None:
                import vllm.v1.attention.backends.flashinfer as module
            # Process-group boundary: this process is one rank of a DCP group of the options' size.
            for owner, name, value in compat.dcp_group_patches(module, options.dcp_world_size, options.dcp_rank):
                stack.enter_context(mock.patch.object(owner, name, value))
        yield


def _per_layer_parameters(options: BuilderOptions):
    """No model is loaded, so there are no attention layers to scan; vLLM's own tests patch this the same way."""
    from vllm.v1.attention.backends.utils import PerLayerParameters

    def layer(window_left: int, soft_cap: float | None):
        return PerLayerParameters(window_left=window_left, logits_soft_cap=soft_cap,
                                  sm_scale=1.0 / math.sqrt(options.head_size), has_sinks=False)

    layers = {LAYER_NAME: layer(options.window_left, options.logits_soft_cap)}
    if options.other_layer is not None:
        layers[OTHER_LAYER_NAME] = layer(*options.other_layer)
    return layers


def make_builder(options: BuilderOptions = BuilderOptions(), gpu: EmulatedGpu = BLACKWELL, module=None,
                 device: torch.device | None = None):
    """A real builder for ``options`` on the emulated ``gpu``; build it under ``builder_context`` too.

    ``module`` is vLLM's flashinfer backend module (default) or a patched copy of it (the self-check)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    if module is None:
        import vllm.v1.attention.backends.flashinfer as module

    vllm_config = make_vllm_config(options)
    spec = FullAttentionSpec(block_size=options.page_size, num_kv_heads=options.num_kv_heads,
                             head_size=options.head_size,
                             **compat.kv_cache_dtype_spec_kwargs(options.kv_cache_dtype, vllm_config.model_config),
                             **compat.dcp_sharded_spec_kwargs(options.dcp_world_size > 1))
    with builder_context(vllm_config, gpu, module, options), mock.patch.object(
        module, "get_per_layer_parameters", lambda *a, **k: _per_layer_parameters(options)
    ):
        return module.FlashInferMetadataBuilder(spec, [LAYER_NAME], vllm_config, device or builder_device())
