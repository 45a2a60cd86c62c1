"""What the MLA kernels must be handed for a batch, computed from the batch alone, and the same fields read
back from a builder's metadata (``view``), so a test compares the two whole."""

from __future__ import annotations

from typing import Any

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import Batch, cdiv
from spec_decode_ci.buildpath.split import Split, cumulative
from spec_decode_ci.sync import outside_sentinels


def _rows(table, seq_lens, page_size) -> list[list[int]]:
    """Each request's pages the kernel reads: the first ceil(seq_len / page_size) of its block-table row."""
    return [list(row[:cdiv(s, page_size)]) for row, s in zip(table, seq_lens)]


def expected(batch: Batch, s: Split) -> dict[str, Any]:
    d = s.num_decodes
    q, seq = list(batch.query_lens), list(batch.seq_lens)
    out: dict[str, Any] = {"counts": (s.num_decodes, s.num_prefills, s.num_decode_tokens)}
    if d:
        out["decode"] = {"seq_lens": seq[:d], "pages": _rows(batch.block_table[:d], seq[:d], batch.page_size)}
    if s.num_prefills:
        out["prefill"] = {
            "query_start_loc": cumulative(q[d:]), "max_query_len": max(q),
            "pages": _rows(batch.block_table[d:], seq[d:], batch.page_size),
            # each prefill's context (the tokens before this step's queries), gathered from the cache once, in order
            "context": [[(0, sl - ql)] if sl > ql else [] for ql, sl in zip(q[d:], seq[d:])],
        }
    return out


def prefill_kernel_rows(batch: Batch, s: Split, chunks: list[list[tuple[int, int, int]]]) -> list[dict[str, Any]]:
    """The rows each prefill attention call must be told (``KernelCall.rows``): first the new tokens (causal, each
    prefill's queries against its own new keys), then one call per context chunk (non-causal, the queries of the
    chunk's prefills against the context tokens it gathered: ``chunks`` as ``compat.mla_context_chunks`` gives
    them, whose coverage ``expected`` checks)."""
    q = list(batch.query_lens[s.num_decodes:])
    calls = [{"batch_size": len(q), "seq_lens": q, "cum_seq_lens_q": cumulative(q), "cum_seq_lens_kv": cumulative(q),
              "causal": True, "num_q_tokens": sum(q)}]
    for chunk in chunks:
        chunk_q, kv = [q[i] for i, _, _ in chunk], [length for _, _, length in chunk]
        calls.append({"batch_size": len(chunk), "seq_lens": kv, "cum_seq_lens_q": cumulative(chunk_q),
                      "cum_seq_lens_kv": cumulative(kv), "causal": False, "num_q_tokens": sum(chunk_q)})
    return calls


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent (start, length) ranges joined, empty ones dropped."""
    out: list[tuple[int, int]] = []
    for start, length in ranges:
        if not length:
            continue
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((start, length))
    return out


def context_coverage(prefill, num_prefills: int) -> tuple[list[list[tuple[int, int]]], int]:
    """Per prefill, the context ranges the chunks gather (merged), and the most tokens any one chunk gathers."""
    per_request: list[list[tuple[int, int]]] = [[] for _ in range(num_prefills)]
    largest = 0
    if prefill.chunked_context is not None:
        for chunk in compat.mla_context_chunks(prefill.chunked_context):
            largest = max(largest, sum(length for _, _, length in chunk))
            for i, start, length in chunk:
                per_request[i].append((start, length))
    return [_merged(r) for r in per_request], largest


def view(metadata, batch: Batch) -> dict[str, Any]:
    """The fields of ``metadata`` the decode and prefill kernels read, in ``expected``'s shape."""
    with outside_sentinels():
        out: dict[str, Any] = {"counts": (metadata.num_decodes, metadata.num_prefills, metadata.num_decode_tokens)}
        d = metadata.num_decodes
        if metadata.decode is not None:
            seq = metadata.decode.seq_lens.tolist()
            out["decode"] = {"seq_lens": seq[:d], "pages": _rows(metadata.decode.block_table.tolist()[:d], seq[:d],
                                                                 batch.page_size)}
        if metadata.prefill is not None:
            p = metadata.prefill
            n = metadata.num_prefills
            seq = list(batch.seq_lens[d:]) + [0] * (p.block_table.shape[0] - n)
            context, largest = context_coverage(p, n)
            out["prefill"] = {"query_start_loc": p.query_start_loc.tolist(), "max_query_len": p.max_query_len,
                              "pages": _rows(p.block_table.tolist()[:n], seq[:n], batch.page_size),
                              "context": context}
            out["largest_context_chunk"] = largest
        return out


def decode_query_start(metadata) -> list[int] | None:
    """The decode query offsets a varlen MLA decode kernel reads, where the metadata carries them."""
    qsl = getattr(metadata.decode, "query_start_loc", None)
    if qsl is None:
        return None
    with outside_sentinels():
        return qsl.tolist()


def decode_query_bound(metadata) -> int | None:
    """The longest decode query a varlen MLA decode kernel is told to expect (it tiles and picks its ragged path
    by it), where the metadata carries one."""
    return getattr(metadata.decode, "max_query_len", None)
