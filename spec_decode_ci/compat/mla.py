"""Differences of vLLM's MLA builders: prefill kernels as backend objects, context chunks."""

from __future__ import annotations

from typing import Any

from spec_decode_ci.compat.probes import difference, require


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
