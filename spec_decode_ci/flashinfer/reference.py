"""Independent reference values for a batch, in plain Python integers (no torch, no vLLM).

What the attention kernels must be given, derived from the batch alone: if vLLM's builder hands them
anything else (a stale buffer, a wrong slice), the equality tests fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spec_decode_ci.buildpath.batches import Batch, cdiv
from spec_decode_ci.buildpath.split import Split, cumulative


@dataclass(frozen=True)
class TrtllmPrefillRef:
    cum_seq_lens_kv: list[int]
    cum_seq_lens_q: list[int]
    seq_lens: list[int]
    block_tables: list[list[int]]  # the pages each prefill reads
    max_q_len: int
    max_seq_len: int


@dataclass(frozen=True)
class TrtllmDecodeRef:
    seq_lens: list[int]
    block_tables: list[list[int]]
    max_seq_len: int


@dataclass(frozen=True)
class PagedKvRef:
    """What FlashInfer's native wrappers' ``plan()`` must describe for a slice of requests."""

    pages: list[list[int]]  # the page ids each request reads, in order
    last_page_len: list[int]
    qo_indptr: list[int]  # rebased to the slice's first query token


@dataclass(frozen=True)
class LayerAttention:
    """The attention layer every native ``plan()`` must describe, whatever the batch."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    sm_scale: float
    window_left: int  # -1: no sliding window
    logits_soft_cap: float | None
    q_data_type: str  # torch dtype names without "torch."
    kv_data_type: str


def layer_attention(num_heads: int, num_kv_heads: int, head_dim: int, page_size: int, window_left: int,
                    logits_soft_cap: float | None, dtype: str = "bfloat16") -> LayerAttention:
    """A Llama-style layer of these shapes in ``dtype`` (query and an unquantized KV cache alike), scaled by
    1/sqrt(head_dim)."""
    return LayerAttention(num_heads, num_kv_heads, head_dim, page_size, 1.0 / math.sqrt(head_dim), window_left,
                          logits_soft_cap, dtype, dtype)


def trtllm_prefill(batch: Batch, s: Split) -> TrtllmPrefillRef:
    start = s.num_decodes
    seqs = list(batch.seq_lens[start:])
    return TrtllmPrefillRef(
        cum_seq_lens_kv=cumulative(cdiv(x, batch.page_size) for x in seqs),
        cum_seq_lens_q=cumulative(batch.query_lens[start:]),
        seq_lens=seqs,
        block_tables=[list(row) for row in batch.block_table[start:]],
        max_q_len=max(batch.query_lens[start:]),
        max_seq_len=max(batch.seq_lens),
    )


def trtllm_decode(batch: Batch, s: Split) -> TrtllmDecodeRef:
    n = s.num_decodes
    return TrtllmDecodeRef(list(batch.seq_lens[:n]), [list(r) for r in batch.block_table[:n]], max(batch.seq_lens))


def paged_kv(batch: Batch, start: int, end: int, kv_lens: list[int] | None = None) -> PagedKvRef:
    """``kv_lens``: the KV lengths the requests read (default: their seq lens); each reads its first
    ceil(kv_len / page) pages."""
    page = batch.page_size
    lens = list(batch.seq_lens[start:end]) if kv_lens is None else kv_lens
    return PagedKvRef(
        pages=[list(row[:cdiv(n, page)]) for row, n in zip(batch.block_table[start:end], lens)],
        last_page_len=[x % page or (page if x else 0) for x in lens],  # no pages: nothing to read
        qo_indptr=cumulative(batch.query_lens[start:end]),
    )


def draft_block_mask(query_lens: list[int], causal: bool, columns: int) -> list[list[bool]]:
    """XQA's draft-block mask for decodes of these query lengths, one row per query token: row i of a request of
    q tokens may see draft column j < q, and only j <= i where attention is causal; ``columns`` wide."""
    return [[j < q and (not causal or j <= i) for j in range(columns)] for q in query_lens for i in range(q)]
