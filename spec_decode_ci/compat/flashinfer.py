"""Differences of vLLM's FlashInfer backend: TRTLLM availability and metadata, the non-causal path, the decode
queries the kernel reads, decode context parallel."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from spec_decode_ci.compat.probes import MissingVllmField, probe, difference, require, _has_field


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
