"""Batch factory: spec-decode batches as vLLM's runner lays them out (decodes first, then prefills), turned
into a real ``CommonAttentionMetadata``.

Block tables give every request its own distinct page ids, so a metadata field that reads the wrong row or
a stale buffer cannot match the reference by accident.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

import torch

from spec_decode_ci import compat


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Batch:
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]  # context + this step's query tokens
    page_size: int
    block_table: tuple[tuple[int, ...], ...]  # the request's page ids, ceil(seq_len / page_size) of them
    # CUDA-graph padding (vLLM's runner pads a batch to a captured size): zero-length requests after the real
    # ones, and tokens after the real ones that belong to no request.
    padded_reqs: int = 0
    padded_tokens: int = 0
    padding: compat.CudaGraphPadding | None = None  # the runner's rules the padded requests and tokens follow
    # False: each request's queries attend to one another both ways (a DFlash drafter's block of draft positions).
    causal: bool = True

    @property
    def num_reqs(self) -> int:
        """Real requests (the padded ones are not counted)."""
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    def describe(self) -> str:
        padding = f" +{self.padded_reqs} padded reqs +{self.padded_tokens} padded tokens" if (
            self.padded_reqs or self.padded_tokens) else ""
        mask = "" if self.causal else " non-causal"
        return f"q={list(self.query_lens)} seq={list(self.seq_lens)} page={self.page_size}{padding}{mask}"


def make_batch(query_lens: list[int], seq_lens: list[int], page_size: int, seed: int = 0) -> Batch:
    """A batch with these lengths; pages are a shuffled range starting at 1, distinct across requests."""
    if len(query_lens) != len(seq_lens) or any(q < 1 or s < q for q, s in zip(query_lens, seq_lens)):
        raise ValueError(f"need 1 <= query_len <= seq_len per request, got {query_lens} / {seq_lens}")
    pages_per_req = [cdiv(s, page_size) for s in seq_lens]
    pages = list(range(1, sum(pages_per_req) + 1))
    random.Random(seed).shuffle(pages)
    rows, start = [], 0
    for n in pages_per_req:
        rows.append(tuple(pages[start:start + n]))
        start += n
    return Batch(tuple(query_lens), tuple(seq_lens), page_size, tuple(rows))


def spec_decode_batch(num_decodes: int, num_prefills: int, num_spec_tokens: int, page_size: int,
                      seed: int = 0, decode_query_len: int | None = None) -> Batch:
    """Decodes with 1 + k query tokens (or ``decode_query_len``), then chunked prefills longer than 1 + k."""
    rng = random.Random(seed)
    threshold = 1 + num_spec_tokens
    q_decode = decode_query_len or threshold
    query_lens = [q_decode] * num_decodes + [rng.randint(threshold + 1, threshold + 40) for _ in range(num_prefills)]
    seq_lens = [q + rng.choice([0, 1, page_size - 1, page_size, page_size + 1, rng.randint(0, 5 * page_size)])
                for q in query_lens]
    return make_batch(query_lens, seq_lens, page_size, seed)


class Choices:
    """Where a random batch's choices come from: ``random.Random`` here, Hypothesis' ``draw`` in the tests."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def one_of(self, options: list[Any]) -> Any:
        return self.rng.choice(options)


def random_spec_decode_batch(choose: Choices, page_size: int, num_spec_tokens: int, max_seq_len: int,
                             max_reqs: int = 64, max_prefill_query: int = 300) -> Batch:
    """1..max_reqs requests: decodes (1..1+k query tokens, uniform or not) first, then prefills; seq lens on,
    around and between page boundaries."""
    threshold = 1 + num_spec_tokens
    num_reqs = choose.integer(1, max_reqs)
    num_decodes = choose.integer(0, num_reqs)
    uniform = choose.one_of([True, False])
    q_decode = choose.integer(1, threshold)
    query_lens = [q_decode if uniform else choose.integer(1, threshold) for _ in range(num_decodes)]
    query_lens += [choose.integer(threshold + 1, max_prefill_query) for _ in range(num_reqs - num_decodes)]
    seq_lens = []
    for q in query_lens:
        pages = choose.integer(0, max_seq_len // page_size - 1)
        edge = choose.one_of([-1, 0, 0, 1, None])
        seq = pages * page_size + (edge if edge is not None else choose.integer(0, page_size - 1))
        seq_lens.append(min(max_seq_len, max(q, seq)))
    return make_batch(query_lens, seq_lens, page_size, seed=choose.integer(0, 2**16))


def padded_to_cuda_graph(batch: Batch, num_tokens_padded: int, uniform_query_len: int, max_num_seqs: int,
                         padding: compat.CudaGraphPadding) -> Batch:
    """``batch`` as vLLM's runner (``padding``) hands it to ``build()`` when replaying a CUDA graph captured for
    ``num_tokens_padded`` tokens (``compat.CudaGraphPadding.padded_counts``: zero-length requests after a
    uniform decode batch, padded tokens after the real ones)."""
    reqs, tokens = padding.padded_counts(batch.query_lens, num_tokens_padded, uniform_query_len, max_num_seqs)
    return dataclasses.replace(batch, padded_reqs=reqs, padded_tokens=tokens, padding=padding)


@dataclass
class DeviceBatch:
    """The ``CommonAttentionMetadata`` of a batch, and which of its tensors live on the device."""

    common: Any
    device_tensors: dict[str, torch.Tensor]


def common_attn_metadata(batch: Batch, device: torch.device, max_pages_per_req: int,
                         dcp_local_lens: list[int] | None = None,
                         host_bound_excess: list[int] | None = None) -> DeviceBatch:
    """The batch as vLLM's runner lays it out; padded requests and tokens are filled by the runner's rules
    (``batch.padding``). ``host_bound_excess``: how far the runner's host upper bound of each real request's
    seq_len runs ahead of it (None: exact)."""
    pad = batch.padding if batch.padded_reqs or batch.padded_tokens else None
    query_start = [0]
    for q in batch.query_lens:
        query_start.append(query_start[-1] + q)
    query_start += [query_start[-1]] * batch.padded_reqs  # zero-length requests
    padded_seq_lens = [pad.seq_len] * batch.padded_reqs if pad else []
    seq_lens = list(batch.seq_lens) + padded_seq_lens
    table = torch.zeros(batch.num_reqs + batch.padded_reqs, max_pages_per_req, dtype=torch.int32)
    for i, row in enumerate(batch.block_table):
        table[i, :len(row)] = torch.tensor(row, dtype=torch.int32)
    if pad:
        table[batch.num_reqs:] = pad.block_id
    slots = []
    for q, s, row in zip(batch.query_lens, batch.seq_lens, batch.block_table):
        slots += [row[pos // batch.page_size] * batch.page_size + pos % batch.page_size for pos in range(s - q, s)]
    slots += [pad.slot] * batch.padded_tokens if pad else []

    excess = list(host_bound_excess or [0] * batch.num_reqs) + [0] * batch.padded_reqs
    host = {
        "query_start_loc_cpu": torch.tensor(query_start, dtype=torch.int32),
        # No exact host seq_lens is given: a path that needs them must copy them from the device, which is the
        # sync the guard avoids.
        "seq_lens_cpu_upper_bound": torch.tensor([s + e for s, e in zip(seq_lens, excess)], dtype=torch.int32),
    }
    device_tensors = {
        "query_start_loc": torch.tensor(query_start, dtype=torch.int32, device=device),
        "seq_lens": torch.tensor(seq_lens, dtype=torch.int32, device=device),
        "block_table_tensor": table.to(device),
        "slot_mapping": torch.tensor(slots, dtype=torch.int64, device=device),
    }
    scalars = {"num_reqs": batch.num_reqs + batch.padded_reqs, "num_actual_tokens": batch.num_tokens + batch.padded_tokens,
               "max_query_len": max(batch.query_lens), "max_seq_len": max(batch.seq_lens), "causal": batch.causal}
    if dcp_local_lens is not None:  # the runner's rank-local lengths; a padded request's share of nothing is 0
        local = list(dcp_local_lens) + padded_seq_lens
        fields = compat.dcp_local_seq_lens_fields(torch.tensor(local, dtype=torch.int32, device=device),
                                                  torch.tensor(local, dtype=torch.int32))
        device_tensors["dcp_local_seq_lens"] = fields["dcp_local_seq_lens"]
        host.update({k: v for k, v in fields.items() if k != "dcp_local_seq_lens"})
    return DeviceBatch(compat.common_attn_metadata(**host, **device_tensors, **scalars), device_tensors)
