"""What differs between the vLLM releases the harness supports: one function per difference, named for it.

Each function probes the installed vLLM's code (a signature, a dataclass field, a module), never its version
string, and is registered with the first release where the newer form appears (``DIFFERENCES``). Where neither
the old nor the new form is present, it raises ``MissingVllmField`` naming what it looked for: a rename in a
future vLLM then fails loudly here instead of dropping out of a check.

Adding a vLLM release: add a function here for each new difference, with its ``since`` release; the native
pipeline's compatibility lane (``compat_lane_releases``) then runs the tier on it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable

OLDEST = "0.20.0"  # the first release with PR #39546's fix
NEWEST = "0.33.0"  # the newest release the tier is run on


@dataclass(frozen=True)
class Difference:
    name: str
    since: str  # the first release with the newer form
    what: str


DIFFERENCES: dict[str, Difference] = {}


class MissingVllmField(RuntimeError):
    """The installed vLLM lacks a field, class or module the harness reads, in every form it knows."""


def difference(since: str, what: str) -> Callable[[Callable], Callable]:
    def register(func: Callable) -> Callable:
        DIFFERENCES[func.__name__] = Difference(func.__name__, since, what)
        func.since = since
        return func
    return register


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def compat_lane_releases() -> tuple[str, ...]:
    """The releases the compatibility lane runs: the oldest and newest claimed, and every release in between
    where a difference appears (so each branch of this module runs on a release that takes it)."""
    releases = {OLDEST, NEWEST, *(d.since for d in DIFFERENCES.values())}
    return tuple(sorted(releases, key=_version_key))


def require(owner: Any, *names: str, what: str) -> Any:
    """The first of ``names`` that ``owner`` has; ``MissingVllmField`` naming all of them otherwise."""
    for name in names:
        if hasattr(owner, name):
            return getattr(owner, name)
    label = getattr(owner, "__name__", type(owner).__name__)
    raise MissingVllmField(f"{what}: {label} has none of {', '.join(names)} (a vLLM change the harness "
                           f"does not know; add it to spec_decode_ci.compat)")


def require_fields(cls: type, names: Iterable[str]) -> None:
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = [n for n in names if n not in fields]
    if missing:
        raise MissingVllmField(f"{cls.__module__}.{cls.__name__} has no field {', '.join(missing)} "
                               f"(a vLLM change the harness does not know; add it to spec_decode_ci.compat)")


def _has_field(cls: type, name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(cls)}


# --- FlashInfer backend ---------------------------------------------------------------------------------------

@difference("0.25.0", "supports_trtllm_attention(is_prefill) decides per phase; before, once for both")
def trtllm_availability_per_phase() -> bool:
    import vllm.utils.flashinfer as fi_utils

    check = require(fi_utils, "supports_trtllm_attention", what="TRTLLM availability")
    return "is_prefill" in inspect.signature(check).parameters


@difference("0.25.0", "TRTLLM decode metadata class FlashInferTrtllmAPIDecode (was TRTLLMDecode)")
def trtllm_decode_metadata_class(module) -> str:
    names = ("FlashInferTrtllmAPIDecode", "TRTLLMDecode")
    return require(module, *names, what="TRTLLM decode metadata class").__name__


@difference("0.28.0", "TRTLLM decode metadata carries q_len_per_req (uniform spec-decode query length)")
def decode_query_len_per_request(decode) -> int | None:
    """The uniform query length the TRTLLM decode kernel is told, or None where the metadata has no such field."""
    if dataclasses.is_dataclass(decode) and _has_field(type(decode), "q_len_per_req"):
        return decode.q_len_per_req
    return None


@difference("0.29.0", "TRTLLM-gen varlen decode (use_trtllm_gen_varlen_decode); 0.30.0 adds XQA (use_xqa): "
                      "decodes of different query lengths stay decodes")
def decodes_may_be_ragged(builder) -> bool:
    return bool(getattr(builder, "use_xqa", False) or getattr(builder, "use_trtllm_gen_varlen_decode", False))


@difference("0.29.0", "CacheConfig.kv_cache_layout, resolved by the engine core at start-up; before, "
                      "read from get_kv_cache_layout() when wrappers are made")
def set_kv_cache_layout(vllm_config, layout: str) -> None:
    if _has_field(type(vllm_config.cache_config), "kv_cache_layout"):
        vllm_config.cache_config.kv_cache_layout = layout


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
        raise MissingVllmField("page locking: none of PIN_MEMORY / is_pin_memory_available found in "
                               "vllm.utils.platform_utils, vllm.utils.torch_utils, vllm.v1.utils or the backend")
    init = v1_utils.CpuGpuBuffer.__init__
    if "pin_memory" in (init.__kwdefaults__ or {}):  # a default bound when vLLM was imported
        patches.append((init, "__kwdefaults__", {**init.__kwdefaults__, "pin_memory": available}))
    return patches


INDPTR_ZEROING = r"paged_kv_indptr_prefill_gpu\[(?::1|0)\] = 0"


@difference("0.21.0", "the prefill indptr's element 0 is zeroed as a slice ([:1] = 0, no host scalar copy); "
                      "0.20.x stores a Python int ([0] = 0)")
def indptr_zeroing_pattern() -> str:
    """The source text of the TRTLLM prefill's indptr zeroing, in either release's form (self-check)."""
    return INDPTR_ZEROING


@difference("0.32.0", "cascade attention no longer forces the host copy of seq_lens (guard without use_cascade)")
def seq_lens_guard_pattern() -> str:
    """The source text of the host-copy guard, with or without the cascade term (self-check)."""
    return r"needs_seq_lens_cpu = self\.use_dcp(?P<cascade>(?: or use_cascade)?) or not all_uses_trtllm"


@dataclass(frozen=True)
class CudaGraphPadding:
    """How vLLM's GPU model runner fills the requests and tokens it adds to reach a captured CUDA-graph size:
    padded requests have no query tokens (``query_start_loc`` repeats its last entry), ``seq_len`` and
    block-table rows of ``block_id``; padded tokens map to ``slot``; ``num_actual_tokens`` counts them."""

    seq_len: int
    block_id: int
    slot: int


_RUNNER_PADDING_RULES = {
    "padded requests have no query tokens": r"query_start_loc\.np\[num_reqs \+ 1 ?:\]\.fill\(cu_num_tokens\[-1\]\)",
    "padded requests have seq_len 0": r"self\.seq_lens\[num_reqs:\]\.fill_\(0\)",
    "padded block-table rows hold NULL_BLOCK_ID": r"\[num_reqs:num_reqs_padded\]\.fill_\(NULL_BLOCK_ID\)",
    "padded tokens map to slot -1 (PAD_SLOT_ID)": r"slot_mapping\[num_tokens_unpadded:num_tokens_padded\]\.fill_\(-1\)",
    "num_actual_tokens counts padded tokens": r"num_actual_tokens=num_tokens_padded",
}
_DISPATCHER_PADDING_RULES = {  # vllm/v1/cudagraph_dispatcher.py: how many requests a padded batch gets
    "a uniform decode graph of T tokens replays min(T // (1 + k), max_num_seqs) requests":
        r"num_reqs = min\(num_tokens_padded // uniform_decode_query_len, max_num_seqs\)",
}


@lru_cache(maxsize=1)
def cudagraph_padding() -> CudaGraphPadding:
    """The runner's padding rules, read from the installed vLLM's ``gpu_model_runner`` source (not imported); a
    rule no longer found there fails by name."""
    import importlib.util
    import re
    from pathlib import Path

    from vllm.v1.attention.backends import utils

    def source(module: str) -> str:
        return Path(importlib.util.find_spec(module).origin).read_text()

    runner, dispatcher = source("vllm.v1.worker.gpu_model_runner"), source("vllm.v1.cudagraph_dispatcher")
    missing = [rule for rule, pattern in _RUNNER_PADDING_RULES.items() if not re.search(pattern, runner)]
    missing += [rule for rule, pattern in _DISPATCHER_PADDING_RULES.items() if not re.search(pattern, dispatcher)]
    if missing:
        raise MissingVllmField(f"vLLM's runner no longer shows how it pads to a CUDA-graph size: "
                               f"{'; '.join(missing)} (update spec_decode_ci.compat)")
    return CudaGraphPadding(seq_len=0, block_id=require(utils, "NULL_BLOCK_ID", what="padding block id"),
                            slot=require(utils, "PAD_SLOT_ID", what="padding slot id"))


@difference("0.28.0", "the TRTLLM decode metadata tells the kernel each request's queries (q_len_per_req; "
                      "q_cu_seq_lens for ragged or padded batches); before, forward() divided the decode tokens "
                      "by the decode requests")
def decode_query_ranges(metadata) -> list[tuple[int, int]]:
    """The query-token range the TRTLLM decode kernel reads for each decode request."""
    decode, n = metadata.decode, metadata.num_decodes
    cu = getattr(decode, "q_cu_seq_lens", None) if dataclasses.is_dataclass(decode) else None
    if cu is not None:
        bounds = cu.tolist()
        return [(bounds[i], bounds[i + 1]) for i in range(n)]
    q = decode_query_len_per_request(decode)
    if q is None:  # forward(): q_len_per_req = num_decode_tokens // num_decodes, or 1 if that does not divide
        q = metadata.num_decode_tokens // n if metadata.num_decode_tokens % n == 0 else 1
    return [(i * q, (i + 1) * q) for i in range(n)]


@difference("0.31.0", "the builder asks get_dcp_world_size_and_rank(kv_cache_spec.dcp_sharded) for its DCP "
                      "rank; before, get_dcp_group()")
def dcp_group_patches(module, world_size: int, rank: int) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, value) patches that make ``module``'s builder rank ``rank`` of a DCP group."""
    from types import SimpleNamespace

    if hasattr(module, "get_dcp_world_size_and_rank"):
        return [(module, "get_dcp_world_size_and_rank",
                 lambda enabled=True: (world_size, rank) if enabled else (1, 0))]
    require(module, "get_dcp_group", what="the DCP process group")
    return [(module, "get_dcp_group", lambda: SimpleNamespace(world_size=world_size, rank_in_group=rank))]


def dcp_sharded_spec_kwargs(sharded: bool) -> dict[str, Any]:
    """``FullAttentionSpec`` keywords for a DCP-sharded KV cache (the field exists where the builder reads it)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return {"dcp_sharded": True} if sharded and _has_field(FullAttentionSpec, "dcp_sharded") else {}


@difference("0.30.0", "the runner's host copy of the DCP-local seq lens is an upper bound "
                      "(dcp_local_seq_lens_cpu_upper_bound; was dcp_local_seq_lens_cpu)")
def dcp_local_seq_lens_fields(device_lens, host_lens) -> dict[str, Any]:
    from vllm.v1.attention.backend import CommonAttentionMetadata

    names = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    host = next((n for n in ("dcp_local_seq_lens_cpu_upper_bound", "dcp_local_seq_lens_cpu") if n in names), None)
    if host is None or "dcp_local_seq_lens" not in names:
        raise MissingVllmField("CommonAttentionMetadata has no dcp_local_seq_lens / dcp_local_seq_lens_cpu"
                               "[_upper_bound] (update spec_decode_ci.compat)")
    return {"dcp_local_seq_lens": device_lens, host: host_lens}


# --- Metadata and configuration -------------------------------------------------------------------------------

COMMON_METADATA_FIELDS = ("query_start_loc", "query_start_loc_cpu", "seq_lens", "seq_lens_cpu_upper_bound",
                          "num_reqs", "num_actual_tokens", "max_query_len", "max_seq_len", "block_table_tensor",
                          "slot_mapping", "causal")


def common_attn_metadata(**fields: Any):
    """A ``CommonAttentionMetadata`` from the fields every supported release has (all required by name)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    require_fields(CommonAttentionMetadata, fields)
    return CommonAttentionMetadata(**fields)


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


@difference("0.28.0", "the GPU sync check's mode is fixed at import (gpu_sync_debug._SYNC_CHECK_MODE)")
def vllm_sync_check_as_errors():
    """A context in which vLLM's own GPU sync check, where this vLLM has one, raises on a sync."""
    import contextlib
    import os
    from unittest import mock

    module = vllm_sync_check_module()
    if module is None:
        return contextlib.nullcontext()
    if hasattr(module, "_SYNC_CHECK_MODE"):
        return mock.patch.object(module, "_SYNC_CHECK_MODE", "error")
    require(module, "enable_gpu_sync_check", what="vLLM's GPU sync check")
    return mock.patch.dict(os.environ, {"VLLM_GPU_SYNC_CHECK": "error"})


# --- MLA builders ---------------------------------------------------------------------------------------------

def mla_backend_priorities(capability: tuple[int, int]) -> list[str]:
    """The attention backends vLLM's CUDA platform tries, in order, for an MLA model on a GPU of ``capability``.

    Read from ``vllm.platforms.cuda._get_backend_priorities``, compiled alone from its source: that module loads
    the CUDA driver on import, so it cannot be imported where there is no GPU."""
    import ast
    import importlib.util

    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    spec = importlib.util.find_spec("vllm.platforms.cuda")
    source = open(spec.origin).read()
    found = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities"]
    if not found:
        raise MissingVllmField(f"MLA backend priorities: {spec.origin} has no _get_backend_priorities (a vLLM "
                               f"change the harness does not know; add it to spec_decode_ci.compat)")
    function = found[0]
    function.decorator_list = []
    namespace: dict[str, Any] = {"AttentionBackendEnum": AttentionBackendEnum, "DeviceCapability": DeviceCapability,
                                 "CacheDType": str}
    exec(compile(ast.Module([function], type_ignores=[]), spec.origin, "exec"), namespace)
    # kv_cache_dtype None: a bf16 cache, the default, so no quantized-cache branch is taken.
    return [b.name for b in namespace["_get_backend_priorities"](True, DeviceCapability(*capability))]


@difference("0.21.0", "MLA prefill kernels are backend objects (get_mla_prefill_backend) that the builder takes "
                      "from the attention layer; 0.20.x picks FlashInfer, cuDNN or TRTLLM-ragged prefill itself")
def mla_prefill_backend(vllm_config, num_heads: int, scale: float, dims: dict[str, int]) -> Any | None:
    """The MLA prefill backend vLLM selects for ``vllm_config`` on the current (emulated) platform, made as the
    attention layer makes it; None where the builder chooses its prefill kernel itself."""
    try:
        from vllm.v1.attention.backends.mla.prefill import get_mla_prefill_backend
    except ImportError:
        return None
    return get_mla_prefill_backend(vllm_config)(num_heads=num_heads, scale=scale, vllm_config=vllm_config, **dims)


@difference("0.28.0", "MLA chunked context is a list of ContextChunk objects, one per run of prefills; before, "
                      "tensors with one row per chunk over every prefill")
def mla_context_chunks(chunked_context) -> list[list[tuple[int, int, int]]]:
    """Per context chunk, the (prefill index, first context token, token count) the gather kernel is given."""
    if hasattr(chunked_context, "chunks"):
        chunks = []
        for chunk in chunked_context.chunks:
            first = chunk.request_slice.start
            starts, bounds = chunk.starts.tolist(), chunk.cu_seq_lens.tolist()
            chunks.append([(first + i, starts[i], bounds[i + 1] - bounds[i]) for i in range(len(starts))])
        return chunks
    starts = require(chunked_context, "starts", what="MLA chunked context starts").tolist()
    bounds = require(chunked_context, "cu_seq_lens", what="MLA chunked context cu_seq_lens").tolist()
    return [[(i, row_starts[i], row_bounds[i + 1] - row_bounds[i]) for i in range(len(row_starts))]
            for row_starts, row_bounds in zip(starts, bounds)]


def init_workspace_manager(device) -> None:
    """vLLM's per-process workspace manager, which the GPU runner sets up and MLA prefill backends draw from."""
    try:
        from vllm.v1.worker import workspace
    except ImportError:
        return
    if not workspace.is_workspace_manager_initialized():
        workspace.init_workspace_manager(device)
