"""Reads what ``build()`` produced into plain Python values, comparable with ``reference``."""

from __future__ import annotations

from typing import Any

import torch

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import Batch
from spec_decode_ci.buildpath.run import BuildResult, PlanCall
from spec_decode_ci.flashinfer.reference import LayerAttention, PagedKvRef, TrtllmDecodeRef, TrtllmPrefillRef

# Each field of ``LayerAttention`` and the ``plan()`` keywords that carry it (the prefill wrapper says head_dim_qk,
# the decode wrapper head_dim; the DCP prefill wrapper kv_cache_dtype).
PLAN_ATTENTION_KEYWORDS = {
    "num_qo_heads": ("num_qo_heads",), "num_kv_heads": ("num_kv_heads",), "head_dim": ("head_dim_qk", "head_dim"),
    "page_size": ("page_size",), "sm_scale": ("sm_scale",), "window_left": ("window_left",),
    "logits_soft_cap": ("logits_soft_cap",), "q_data_type": ("q_data_type",),
    "kv_data_type": ("kv_data_type", "kv_cache_dtype"),
}


def as_list(t: Any) -> Any:
    return t.tolist() if isinstance(t, torch.Tensor) else t


def _pages(table: torch.Tensor, batch_rows: tuple[tuple[int, ...], ...]) -> list[list[int]]:
    """The first ceil(seq/page) entries of each row: what a kernel reads for that request."""
    return [table[i, :len(row)].tolist() for i, row in enumerate(batch_rows)]


def trtllm_prefill(result: BuildResult, batch: Batch) -> TrtllmPrefillRef:
    p = result.metadata.prefill
    start = result.metadata.num_decodes
    return TrtllmPrefillRef(
        cum_seq_lens_kv=as_list(p.cum_seq_lens_kv), cum_seq_lens_q=as_list(p.cum_seq_lens_q),
        seq_lens=as_list(p.seq_lens), block_tables=_pages(p.block_tables, batch.block_table[start:]),
        max_q_len=int(p.max_q_len), max_seq_len=int(p.max_seq_len),
    )


def trtllm_decode(result: BuildResult, batch: Batch) -> TrtllmDecodeRef:
    d = result.metadata.decode
    n = result.metadata.num_decodes
    return TrtllmDecodeRef(as_list(d.seq_lens), _pages(d.block_tables, batch.block_table[:n]), int(d.max_seq_len))


def decode_offsets_off(metadata) -> str | None:
    """What is wrong with the TRTLLM decode's query offsets (``q_cu_seq_lens``), where it has them: FlashInfer's
    ``cum_seq_lens_q`` holds one offset per decode and one more. None where they are right or absent."""
    offsets = getattr(metadata.decode, "q_cu_seq_lens", None)
    if offsets is None or len(offsets) == metadata.num_decodes + 1:
        return None
    return (f"expected {metadata.num_decodes + 1} query offsets for {metadata.num_decodes} decodes (FlashInfer's "
            f"cum_seq_lens_q: batch + 1); came {len(offsets)}. Look: the qo_indptr slices of build() and "
            f"_compute_decode_query_lens")


def planned_paged_kv(call: PlanCall) -> PagedKvRef:
    """What a native wrapper's ``plan()`` was told, per request (indptr may be offset into the whole batch)."""
    k = call.kwargs
    indptr = as_list(k.get("paged_kv_indptr", k.get("indptr")))
    indices = as_list(k.get("paged_kv_indices", k.get("indices")))
    last = as_list(k.get("paged_kv_last_page_len", k.get("last_page_len")))
    n = len(indptr) - 1
    qo = as_list(k.get("qo_indptr"))
    if qo is None:  # decode plan: one query row per request, or q_len_per_req of them
        q = k.get("q_len_per_req", 1)
        qo = [i * q for i in range(n + 1)]
    return PagedKvRef(pages=[indices[indptr[i]:indptr[i + 1]] for i in range(n)], last_page_len=last[:n],
                      qo_indptr=qo)


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def planned_attention(call: PlanCall) -> LayerAttention:
    """The attention layer a native wrapper's ``plan()`` was told of."""
    values = {}
    for field_name, keywords in PLAN_ATTENTION_KEYWORDS.items():
        present = [k for k in keywords if k in call.kwargs]
        if not present:
            raise compat.MissingVllmField(f"{call.wrapper}.plan()", " / ".join(keywords),
                                          "the attention parameter the builder plans with",
                                          detail=f"{call.wrapper}.plan() was called without {' or '.join(keywords)}")
        values[field_name] = call.kwargs[present[0]]
    for field_name in ("q_data_type", "kv_data_type"):
        values[field_name] = dtype_name(values[field_name])
    return LayerAttention(**values)


def prefill_on_trtllm(m) -> bool:
    return type(m.prefill).__name__ == compat.TRTLLM_PREFILL_CLASS


def decode_on_trtllm(m) -> bool:
    return type(m.decode).__name__ in compat.TRTLLM_DECODE_CLASSES


def all_phases_on_trtllm(m) -> bool:
    """Every phase the metadata has (prefill, decode) runs TRTLLM's kernels."""
    return (not m.num_prefills or prefill_on_trtllm(m)) and (not m.num_decodes or decode_on_trtllm(m))


def snapshot(result: BuildResult, batch: Batch) -> dict[str, Any]:
    """Everything the kernels would be handed, as plain values (for poisoning differentials)."""
    m = result.metadata
    view: dict[str, Any] = {"counts": (m.num_decodes, m.num_prefills, m.num_decode_tokens, m.num_prefill_tokens),
                            "prefill": type(m.prefill).__name__, "decode": type(m.decode).__name__}
    if prefill_on_trtllm(m):
        view["trtllm_prefill"] = trtllm_prefill(result, batch)
    if decode_on_trtllm(m):
        view["trtllm_decode"] = trtllm_decode(result, batch)
        view["q_len_per_req"] = compat.decode_query_len_per_request(m.decode)
    view["plans"] = [(c.wrapper, planned_paged_kv(c)) for c in result.plans]
    return view


def xqa_draft_mask(decode) -> list[list[bool]] | None:
    """The packed draft-block mask a TRTLLM-API decode hands XQA, one row per query token, unpacked as
    FlashInfer's ``xqa`` documents it (uint16 pairs forming 32-bit words, bit j of word w: draft column 32w + j);
    None where the decode carries none (one query token per request)."""
    if not hasattr(decode, "mask"):
        raise compat.MissingVllmField(type(decode).__name__, "mask", "the packed XQA draft mask of a speculative decode")
    packed = decode.mask
    if packed is None:
        return None
    halves = packed.reshape(-1, packed.shape[-1]).cpu().to(torch.int64) & 0xFFFF  # uint16 read as unsigned
    words = halves[:, 0::2] | (halves[:, 1::2] << 16)
    bits = (words.unsqueeze(-1) >> torch.arange(32)) & 1
    return bits.reshape(words.shape[0], -1).bool().tolist()
