"""What differs between the vLLM releases the harness supports: one function per difference, named for it.

Each function probes the installed vLLM's code (a signature, a dataclass field, a module), never its version
string, and is registered with the first release where the newer form appears (``DIFFERENCES``). Where neither
the old nor the new form is present, it raises ``MissingVllmField`` naming what it looked for: a rename in a
future vLLM then fails loudly here instead of dropping out of a check.

Adding a vLLM release: add a function here for each new difference, with its ``since`` release; the native
pipeline's compatibility lane (``compat_lane_releases``) then runs the tier on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable

OLDEST = "0.20.0"  # the first release with PR #39546's fix
NEWEST = "0.34.0"  # the newest release the tier is run on


@dataclass(frozen=True)
class Difference:
    name: str
    since: str  # the first release with the newer form
    what: str


DIFFERENCES: dict[str, Difference] = {}


class MissingVllmField(RuntimeError):
    """The installed vLLM lacks a field, class or module the harness reads, in every form it knows: the harness
    cannot drive this vLLM (its breakage, not a finding about vLLM). ``module`` and ``field`` name what is
    missing; ``last_found`` is the newest release where the harness found it."""

    def __init__(self, module: str, field: str, what: str = "", last_found: str = NEWEST, detail: str = ""):
        self.module, self.field, self.what, self.last_found = module, field, what, last_found
        super().__init__(f"{detail or f'{module} has no {field}'}{f' ({what})' if what else ''}; the harness last "
                         f"found it in vLLM {last_found}: update spec_decode_ci.compat")

    @property
    def summary(self) -> str:
        return f"{self.module} has no {self.field} (last found in vLLM {self.last_found})"


def _missing_from(exc: BaseException) -> MissingVllmField:
    """A ``MissingVllmField`` for a lookup error raised where compat reads vLLM."""
    if isinstance(exc, ImportError):
        name = exc.name or str(exc)
        module, _, field = name.rpartition(".")
        return MissingVllmField(module or name, field or name, detail=f"module {name} is not importable ({exc})")
    if isinstance(exc, AttributeError) and getattr(exc, "name", None):
        owner = getattr(exc, "obj", None)
        owner_name = getattr(owner, "__name__", type(owner).__name__)
        return MissingVllmField(getattr(owner, "__module__", None) or owner_name, exc.name,
                                detail=f"{owner_name} has no {exc.name}")
    return MissingVllmField("vllm", str(exc), detail=f"{type(exc).__name__} {exc} while reading vLLM")


def _raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by this module's own code (an import it made counts), not deeper in vLLM."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    frames = [f for f in frames if not f.startswith("<frozen importlib")]
    return bool(frames) and frames[-1] == __file__


def probe(func: Callable) -> Callable:
    """Lookups of vLLM's names that fail inside ``func`` (in this module's code) raise ``MissingVllmField``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (AttributeError, KeyError, IndexError, TypeError, ImportError, StopIteration) as exc:
            if _raised_here(exc):
                raise _missing_from(exc) from exc
            raise
    return wrapper


def vllm_module(name: str) -> types.ModuleType:
    """vLLM's module ``name``; ``MissingVllmField`` where it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise _missing_from(exc) from exc
        raise


def module_origin(name: str) -> str | None:
    """The file module ``name`` would be loaded from (not imported), or None where there is none."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    return spec.origin if spec is not None else None


def difference(since: str, what: str) -> Callable[[Callable], Callable]:
    def register(func: Callable) -> Callable:
        DIFFERENCES[func.__name__] = Difference(func.__name__, since, what)
        func = probe(func)
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
    raise MissingVllmField(label, " / ".join(names), what, detail=f"{label} has none of {', '.join(names)}")


def require_fields(cls: type, names: Iterable[str]) -> None:
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = [n for n in names if n not in fields]
    if missing:
        raise MissingVllmField(f"{cls.__module__}.{cls.__name__}", ", ".join(missing),
                               detail=f"{cls.__module__}.{cls.__name__} has no field {', '.join(missing)}")


def _has_field(cls: type, name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(cls)}


# --- FlashInfer backend ---------------------------------------------------------------------------------------

@difference("0.25.0", "supports_trtllm_attention(is_prefill) decides per phase; before, once for both")
def trtllm_availability_per_phase() -> bool:
    import vllm.utils.flashinfer as fi_utils

    check = require(fi_utils, "supports_trtllm_attention", what="TRTLLM availability")
    return "is_prefill" in inspect.signature(check).parameters


TRTLLM_PREFILL_CLASS = "TRTLLMPrefill"
TRTLLM_DECODE_CLASSES = ("FlashInferTrtllmAPIDecode", "TRTLLMDecode")  # newest first


@difference("0.25.0", "TRTLLM decode metadata class FlashInferTrtllmAPIDecode (was TRTLLMDecode)")
def trtllm_decode_metadata_class(module) -> str:
    return require(module, *TRTLLM_DECODE_CLASSES, what="TRTLLM decode metadata class").__name__


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


@difference("0.24.0", "FlashInfer attends non-causally (a DFlash drafter's CommonAttentionMetadata.causal False, "
                      "FlashInferBackend.supports_non_causal()); before, it had no non-causal path")
def flashinfer_attends_non_causally(module) -> bool:
    backend = require(module, "FlashInferBackend", what="the FlashInfer attention backend")
    supports = getattr(backend, "supports_non_causal", None)
    return bool(supports()) if supports is not None else False


NO_NON_CAUSAL_PATH = "this vLLM's FlashInfer backend has no non-causal path (FlashInferBackend.supports_non_causal)"


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
        raise MissingVllmField("vllm.utils.platform_utils", "PIN_MEMORY / is_pin_memory_available",
                               "page locking: looked in vllm.utils.platform_utils, vllm.utils.torch_utils, "
                               "vllm.v1.utils and the backend")
    init = v1_utils.CpuGpuBuffer.__init__
    if "pin_memory" in (init.__kwdefaults__ or {}):  # a default bound when vLLM was imported
        patches.append((init, "__kwdefaults__", {**init.__kwdefaults__, "pin_memory": available}))
    return patches


V1_RUNNER, V2_RUNNER = "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner"


@difference("0.34.0", "model runner V2 only (vllm/v1/worker/gpu/); before, VllmConfig.use_v2_model_runner chose "
                      "between it and V1 (gpu_model_runner.py, cudagraph_dispatcher.py) per configuration")
def model_runner(vllm_config) -> str:
    """The GPU model runner this vLLM runs ``vllm_config`` with (``V1_RUNNER`` or ``V2_RUNNER``); ask under the
    platform the config is for (the choice reads it)."""
    has_v1, has_v2 = module_origin(V1_RUNNER) is not None, module_origin(V2_RUNNER) is not None
    if has_v1 and has_v2 and hasattr(type(vllm_config), "use_v2_model_runner"):
        return V2_RUNNER if vllm_config.use_v2_model_runner else V1_RUNNER
    if has_v1 or has_v2:
        return V1_RUNNER if has_v1 else V2_RUNNER
    raise MissingVllmField("vllm.v1.worker", "gpu_model_runner / gpu.model_runner", "the GPU model runner")


RUNNER_NAMES = {V1_RUNNER: "V1", V2_RUNNER: "V2"}


def shipped_runners() -> tuple[str, ...]:
    """The GPU model runners this vLLM ships (``V1_RUNNER``, ``V2_RUNNER``), found by their modules."""
    return tuple(runner for runner in (V1_RUNNER, V2_RUNNER) if module_origin(runner) is not None)


def runner_name(module: str) -> str:
    """"V1" or "V2" for a GPU model runner's module (``model_runner``), the module itself for any other."""
    return RUNNER_NAMES.get(module, module)


@dataclass(frozen=True)
class CudaGraphPadding:
    """How a vLLM GPU model runner fills the requests and tokens it adds to reach a captured CUDA-graph size:
    padded requests have no query tokens (``query_start_loc`` repeats its last entry), ``seq_len`` and
    block-table rows of ``block_id``; padded tokens map to ``slot``; ``num_actual_tokens`` counts them.

    Which batches are padded, and to what, is the runner's: V1 replays a uniform decode graph of T tokens with
    min(T // (1 + k), max_num_seqs) requests and T tokens, and pads a mixed batch's tokens; V2 captures uniform
    decode graphs per (requests, 1 + k), so a replay holds requests x (1 + k) tokens, and runs a mixed batch on
    a backend without full graphs for them (FlashInfer) piecewise, its attention metadata unpadded."""

    runner: str
    seq_len: int
    block_id: int
    slot: int

    def padded_counts(self, query_lens, num_tokens_padded: int, uniform_query_len: int,
                      max_num_seqs: int) -> tuple[int, int]:
        """(requests, tokens) the runner adds to a batch of ``query_lens`` replayed on a graph of
        ``num_tokens_padded`` tokens."""
        num_tokens = sum(query_lens)
        if num_tokens_padded < num_tokens:
            raise ValueError(f"cannot pad {num_tokens} tokens to {num_tokens_padded}")
        if not all(q == uniform_query_len for q in query_lens):
            return (0, num_tokens_padded - num_tokens) if self.runner == V1_RUNNER else (0, 0)
        if num_tokens_padded % uniform_query_len:
            raise ValueError(f"a uniform decode graph of {num_tokens_padded} tokens needs a multiple of "
                             f"{uniform_query_len}")
        reqs = min(num_tokens_padded // uniform_query_len, max_num_seqs)
        tokens = num_tokens_padded if self.runner == V1_RUNNER else reqs * uniform_query_len
        return reqs - len(query_lens), tokens - num_tokens


# Per runner, per module: the rules ``CudaGraphPadding`` encodes, as the runner's source writes them.
_PADDING_RULES = {
    V1_RUNNER: {
        V1_RUNNER: {
            "padded requests have no query tokens": r"query_start_loc\.np\[num_reqs \+ 1 ?:\]\.fill\(cu_num_tokens\[-1\]\)",
            "padded requests have seq_len 0": r"self\.seq_lens\[num_reqs:\]\.fill_\(0\)",
            "padded block-table rows hold NULL_BLOCK_ID": r"\[num_reqs:num_reqs_padded\]\.fill_\(NULL_BLOCK_ID\)",
            "padded tokens map to slot -1 (PAD_SLOT_ID)":
                r"slot_mapping\[num_tokens_unpadded:num_tokens_padded\]\.fill_\(-1\)",
            "num_actual_tokens counts padded tokens": r"num_actual_tokens=num_tokens_padded",
        },
        "vllm.v1.cudagraph_dispatcher": {
            "a uniform decode graph of T tokens replays min(T // (1 + k), max_num_seqs) requests":
                r"num_reqs = min\(num_tokens_padded // uniform_decode_query_len, max_num_seqs\)",
        },
    },
    V2_RUNNER: {
        V2_RUNNER: {
            "padded requests have no query tokens": r"query_start_loc_np\[num_reqs \+ 1 ?:\] = num_tokens\b",
        },
        "vllm.v1.worker.gpu.input_batch": {
            "padded requests have seq_len 0": r"tl\.store\(seq_lens_ptr \+ block, 0, mask=mask\)",
        },
        "vllm.v1.worker.gpu.block_table": {
            "padded block-table rows hold 0 (NULL_BLOCK_ID)":
                r"if batch_idx >= num_reqs:\s*# Zero out padded rows\.[^@]*?tl\.store\(dst_row_ptr \+ offset, 0,",
            "padded tokens map to PAD_SLOT_ID": r"PAD_ID=PAD_SLOT_ID",
        },
        "vllm.v1.worker.gpu.model_states.default": {
            "a FULL graph's attention metadata counts the padded requests and tokens, any other the real ones":
                r"if cudagraph_mode == CUDAGraphMode\.FULL:[^@]*?num_reqs = input_batch\.num_reqs_after_padding\s*"
                r"num_tokens = input_batch\.num_tokens_after_padding\s*else:[^@]*?num_tokens = input_batch\.num_tokens\n",
        },
        "vllm.v1.worker.gpu.cudagraph_utils": {
            "a uniform decode graph holds requests x (1 + k) tokens, at most max_num_seqs requests":
                r"rounded_num_reqs = rounded_num_tokens // decode_query_len|num_tokens=n \* q,\s*num_reqs=n,",
        },
    },
}


_RUNNER_LAST_FOUND = {V1_RUNNER: "0.33.0"}  # model runner V1 left vLLM in 0.34.0


def last_release_with(runner: str | None) -> str:
    """The newest release that ships GPU model runner ``runner`` (None: code both runners call)."""
    return _RUNNER_LAST_FOUND.get(runner, NEWEST)


@probe
@lru_cache(maxsize=None)
def cudagraph_padding(runner: str) -> CudaGraphPadding:
    """``runner``'s padding rules (``model_runner``), read from the installed vLLM's source (not imported); a rule
    no longer found there fails by name."""
    from pathlib import Path

    utils = vllm_module("vllm.v1.attention.backends.utils")
    missing = []
    for module, rules in _PADDING_RULES[runner].items():
        origin = module_origin(module)
        if origin is None:
            raise MissingVllmField(module.rpartition(".")[0], module.rpartition(".")[2],
                                   "the GPU model runner's padding rules", last_release_with(runner),
                                   detail=f"module {module} is not found")
        source = Path(origin).read_text()
        missing += [f"{module}: {rule}" for rule, pattern in rules.items() if not re.search(pattern, source)]
    if missing:
        raise MissingVllmField(runner, "its CUDA-graph padding rules", detail=f"vLLM's runner no longer shows how it "
                               f"pads to a CUDA-graph size: {'; '.join(missing)}")
    block_id = require(utils, "NULL_BLOCK_ID", what="padding block id")
    if runner == V2_RUNNER and block_id != 0:
        raise MissingVllmField("vllm.v1.attention.backends.utils", "NULL_BLOCK_ID == 0",
                               "model runner V2 zeroes padded block-table rows")
    return CudaGraphPadding(runner, seq_len=0, block_id=block_id,
                            slot=require(utils, "PAD_SLOT_ID", what="padding slot id"))


@difference("0.28.0", "the TRTLLM decode metadata tells the kernel each request's queries (q_len_per_req; "
                      "q_cu_seq_lens for ragged or padded batches); before, forward() divided the decode tokens "
                      "by the decode requests")
def decode_query_ranges(metadata) -> list[tuple[int, int] | None]:
    """The query-token range the TRTLLM decode kernel reads for each decode request (None for a request the
    query offsets vLLM built do not reach: its metadata's defect, shown where the ranges are compared)."""
    decode, n = metadata.decode, metadata.num_decodes
    cu = getattr(decode, "q_cu_seq_lens", None) if dataclasses.is_dataclass(decode) else None
    if cu is not None:
        bounds = cu.tolist()
        return [(bounds[i], bounds[i + 1]) if i + 1 < len(bounds) else None for i in range(n)]
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


@probe
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
        raise MissingVllmField("vllm.v1.attention.backend.CommonAttentionMetadata",
                               "dcp_local_seq_lens / dcp_local_seq_lens_cpu[_upper_bound]")
    return {"dcp_local_seq_lens": device_lens, host: host_lens}


# --- Metadata and configuration -------------------------------------------------------------------------------

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


# --- MLA builders ---------------------------------------------------------------------------------------------

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


@difference("0.28.0", "an MLA prefill backend runs a context chunk given the chunk and its prefills' queries; "
                      "before, given the chunk's index and every prefill's queries")
def mla_context_chunk_runs(chunked_context, q) -> list[tuple[dict[str, Any], int]]:
    """Per context chunk, the keyword arguments of the prefill backend's ``run_prefill_context_chunk`` (less k and
    v) as the forward pass passes them, and the number of context rows it gathered (k's and v's rows)."""
    if hasattr(chunked_context, "chunks"):
        return [({"chunk": chunk, "q": q[chunk.token_slice]}, chunk.num_context_tokens)
                for chunk in chunked_context.chunks]
    bounds = require(chunked_context, "cu_seq_lens", what="MLA chunked context cu_seq_lens").tolist()
    return [({"chunk_idx": i, "q": q}, row[-1]) for i, row in enumerate(bounds)]


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
