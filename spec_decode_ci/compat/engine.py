"""Differences of vLLM's configuration, metadata and engine: the KV cache's dtype and layout, page locking,
common attention metadata, the GPU worker, the drafter's backend, vLLM's own GPU sync check."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any, Iterable

from spec_decode_ci.compat.probes import MissingVllmField, probe, vllm_module, difference, require, require_fields, _has_field


def kv_cache_dtype_spec_kwargs(kv_cache_dtype: str, model_config) -> dict[str, Any]:
    """The dtype (and, for a quantized cache, the quantization mode) a layer's ``FullAttentionSpec`` gets for
    ``--kv-cache-dtype kv_cache_dtype``, from vLLM's own mapping."""
    if kv_cache_dtype == "auto":
        return {"dtype": model_config.dtype}
    import vllm.utils.torch_utils as torch_utils
    import vllm.v1.kv_cache_interface as kv_cache_interface

    to_dtype = require(torch_utils, "kv_cache_dtype_str_to_dtype", what="the KV cache's storage dtype")
    quant_mode = require(kv_cache_interface, "get_kv_quant_mode", what="the KV cache's quantization mode")
    return {"dtype": to_dtype(kv_cache_dtype, model_config), "kv_quant_mode": quant_mode(kv_cache_dtype)}


@difference("0.29.0", "CacheConfig.kv_cache_layout, resolved by the engine core at start-up; before, "
                      "read from get_kv_cache_layout() when wrappers are made")
def set_kv_cache_layout(vllm_config, layout: str) -> None:
    if _has_field(type(vllm_config.cache_config), "kv_cache_layout"):
        vllm_config.cache_config.kv_cache_layout = layout


@difference("0.29.0", "adaptive verification (SpeculativeConfig.enable_adaptive_verification): drafts trimmed on "
                      "the device, their query offsets read by TRTLLM-gen decode from there")
def has_adaptive_verification() -> bool:
    from vllm.config import SpeculativeConfig

    return _has_field(SpeculativeConfig, "enable_adaptive_verification")


def enable_adaptive_verification(vllm_config) -> None:
    """Adaptive verification on in a resolved config (``has_adaptive_verification`` must hold)."""
    vllm_config.speculative_config.enable_adaptive_verification = True


@difference("0.24.0", "page-locking decided once (PIN_MEMORY, CpuGpuBuffer's pin_memory default); before, "
                      "by calling is_pin_memory_available()")
def page_locking_switches(modules: Iterable[Any], available: bool = False) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, value) patches that make every page-locking decision answer ``available``."""
    import vllm.utils.platform_utils as platform_utils
    import vllm.utils.torch_utils as torch_utils
    import vllm.v1.utils as v1_utils

    patches: list[tuple[Any, str, Any]] = []
    for module in (platform_utils, torch_utils, v1_utils, *modules):
        for name, value in (("PIN_MEMORY", available), ("is_pin_memory_available", lambda: available)):
            if hasattr(module, name):
                patches.append((module, name, value))
    if not patches:
        raise MissingVllmField("vllm.utils.platform_utils", "PIN_MEMORY / is_pin_memory_available",
                               "page locking: looked in vllm.utils.platform_utils, vllm.utils.torch_utils, "
                               "vllm.v1.utils and the backend")
    init = v1_utils.CpuGpuBuffer.__init__
    if "pin_memory" in (init.__kwdefaults__ or {}):  # a default bound when vLLM was imported
        patches.append((init, "__kwdefaults__", {**init.__kwdefaults__, "pin_memory": available}))
    return patches


@probe
def common_attn_metadata(**fields: Any):
    """A ``CommonAttentionMetadata`` from the fields every supported release has (all required by name)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    require_fields(CommonAttentionMetadata, fields)
    return CommonAttentionMetadata(**fields)


GPU_WORKER_STEP_METHODS = ("execute_model", "sample_tokens", "take_draft_token_ids")


@probe
def gpu_worker_class() -> type:
    """vLLM's GPU worker, which runs each engine step: ``execute_model``, then ``sample_tokens`` (sampling,
    rejection, the drafter's propose) and, without async scheduling, ``take_draft_token_ids``."""
    worker = require(vllm_module("vllm.v1.worker.gpu_worker"), "Worker", what="GPU worker")
    for method in GPU_WORKER_STEP_METHODS:
        require(worker, method, what="GPU worker step method")
    return worker


@difference("0.21.0", "SpeculativeConfig.attention_backend: the drafter's backend can be pinned")
def drafter_attention_backend_settable() -> bool:
    from vllm.config import SpeculativeConfig

    return _has_field(SpeculativeConfig, "attention_backend")


@difference("0.25.0", "vllm.utils.gpu_sync_debug: vLLM's own GPU sync check, its mode read from "
                      "VLLM_GPU_SYNC_CHECK when checked")
def vllm_sync_check_module():
    """vLLM's own GPU sync check module, or None where this vLLM has none."""
    try:
        return importlib.import_module("vllm.utils.gpu_sync_debug")
    except ModuleNotFoundError:
        return None


@contextlib.contextmanager
def vllm_env_read_afresh():
    """Inside: vLLM reads its environment variables again (an engine's start caches them for the process, where
    this vLLM has that cache); after: the cache as it was, taken anew."""
    from vllm import envs

    cached = getattr(envs, "_is_envs_cache_enabled", lambda: False)()
    if cached:
        envs.disable_envs_cache()
    try:
        yield
    finally:
        if cached:
            envs.enable_envs_cache()


@difference("0.28.0", "the GPU sync check's mode is fixed at import (gpu_sync_debug._SYNC_CHECK_MODE)")
@contextlib.contextmanager
def vllm_sync_check_as_errors():
    """A context in which vLLM's own GPU sync check, where this vLLM has one, raises on a sync; each engine started
    inside warms up unchecked, as vLLM's worker does (its gate opens after warm-up)."""
    import os
    from unittest import mock

    module = vllm_sync_check_module()
    with contextlib.ExitStack() as stack:
        if module is not None:
            if hasattr(module, "_sync_check_enabled"):
                # vLLM opens the gate once per worker and never closes it: an earlier engine of this process left
                # it open, and the next engine's warm-up would be checked as if it were a step
                stack.enter_context(mock.patch.object(module, "_sync_check_enabled", False))
            if hasattr(module, "_SYNC_CHECK_MODE"):
                stack.enter_context(mock.patch.object(module, "_SYNC_CHECK_MODE", "error"))
            else:
                require(module, "enable_gpu_sync_check", what="vLLM's GPU sync check")
                stack.enter_context(mock.patch.dict(os.environ, {"VLLM_GPU_SYNC_CHECK": "error"}))
        yield


@contextlib.contextmanager
def model_classes_inspected_here():
    """Inside: vLLM inspects a model class in this process rather than in a fresh Python process per class (its
    way to keep CUDA uninitialised in the engine's process); for a throwaway process that fills vLLM's cache of
    model-class facts. Where this vLLM has no such step, it inspects as it always does."""
    registry = importlib.import_module("vllm.model_executor.models.registry")
    in_subprocess = getattr(registry, "_run_in_subprocess", None)
    if in_subprocess is None:
        yield
        return
    registry._run_in_subprocess = lambda fn: fn()
    try:
        yield
    finally:
        registry._run_in_subprocess = in_subprocess
