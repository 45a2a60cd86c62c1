"""What an MLA prefill backend hands its attention kernel for a built batch: the new tokens' causal call and one
non-causal call per context chunk, read by running the backend's own ``run_prefill_new_tokens`` and
``run_prefill_context_chunk`` on the metadata ``build()`` made (vLLM's forward makes these calls the same way).

One adapter per prefill backend (``RECORDERS``, keyed by the backend's name) records its kernel's arguments.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator
from unittest import mock

import torch

from spec_decode_ci import compat
from spec_decode_ci.sync import outside_sentinels


@dataclass(frozen=True)
class KernelCall:
    """The arguments of one ragged attention call that say which rows of Q and KV belong to which request."""

    batch_size: int
    seq_lens: list[int]  # KV rows per request
    cum_seq_lens_q: list[int]
    cum_seq_lens_kv: list[int]
    max_q_len: int
    max_kv_len: int
    causal: bool
    num_q_tokens: int  # rows of the query tensor the call was given

    def rows(self) -> dict[str, Any]:
        """Everything but the two maxima, which are bounds the kernel tiles by (checked as bounds)."""
        return {k: v for k, v in asdict(self).items() if k not in ("max_q_len", "max_kv_len")}


def _runs_trtllm_here() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


@contextmanager
def _trtllm_ragged(calls: list[KernelCall]) -> Iterator[None]:
    import flashinfer.prefill as fi_prefill

    real = fi_prefill.trtllm_ragged_attention_deepseek

    def recorded(**kw):
        with outside_sentinels():
            calls.append(KernelCall(
                int(kw["batch_size"]), kw["seq_lens"].tolist(), kw["cum_seq_lens_q"].tolist(),
                kw["cum_seq_lens_kv"].tolist(), int(kw["max_q_len"]), int(kw["max_kv_len"]), bool(kw["is_causal"]),
                kw["query"].shape[0]))
        if _runs_trtllm_here():
            return real(**kw)
        # Hardware boundary: the TRTLLM ragged kernel is SM100's; elsewhere only its arguments are taken.
        out = kw["out"]
        lse = torch.zeros(out.shape[0], out.shape[1], dtype=torch.float32, device=out.device)
        return (out, lse) if kw.get("return_lse") else out

    with mock.patch.object(fi_prefill, "trtllm_ragged_attention_deepseek", recorded):
        yield


RECORDERS: dict[str, Callable[[list[KernelCall]], Any]] = {"TRTLLM_RAGGED": _trtllm_ragged}


def backend_of(metadata) -> Any | None:
    """The prefill backend object the built metadata hands the forward pass (None: this vLLM's builder picks its
    prefill kernel in forward)."""
    return getattr(metadata.prefill, "prefill_backend", None) if metadata.prefill is not None else None


def calls(metadata, num_heads: int, dims: dict[str, int]) -> tuple[KernelCall, list[KernelCall]]:
    """The new tokens' call and each context chunk's, in chunk order, from running ``metadata``'s prefill
    backend on zero tensors of the layer's shapes."""
    backend = backend_of(metadata)
    prefill = metadata.prefill
    record = RECORDERS[backend.get_name()]
    with outside_sentinels():
        num_tokens = int(prefill.query_start_loc[-1])
    qk, v_dim = dims["qk_nope_head_dim"] + dims["qk_rope_head_dim"], dims["v_head_dim"]
    device, dtype = prefill.query_start_loc.device, prefill.q_data_type

    def tensors(rows: int):
        return (torch.zeros(rows, num_heads, qk, device=device, dtype=dtype),
                torch.zeros(rows, num_heads, qk, device=device, dtype=dtype),
                torch.zeros(rows, num_heads, v_dim, device=device, dtype=dtype))

    made: list[KernelCall] = []
    with record(made), torch.no_grad():
        q, k, v = tensors(num_tokens)
        backend.run_prefill_new_tokens(q, k, v, return_softmax_lse=True)
        with outside_sentinels():
            runs = compat.mla_context_chunk_runs(prefill.chunked_context, q) if prefill.chunked_context else []
        for arguments, rows in runs:
            _, k, v = tensors(rows)
            backend.run_prefill_context_chunk(**arguments, k=k, v=v)
    return made[0], made[1:]
