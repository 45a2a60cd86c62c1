"""How a batch splits into decode and prefill phases, cumulative offsets and a DCP rank's share of a sequence,
in plain Python integers: the helpers every backend's independent reference is written with."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from spec_decode_ci.buildpath.batches import Batch


@dataclass(frozen=True)
class Split:
    num_decodes: int
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int


def split(batch: Batch, decode_threshold: int, require_uniform: bool) -> Split:
    """Leading requests with at most ``decode_threshold`` query tokens are decodes (equal lengths if uniform)."""
    q = batch.query_lens
    n = 0
    while n < len(q) and q[n] <= decode_threshold and (not require_uniform or q[n] == q[0]):
        n += 1
    if require_uniform and n < len(q) and all(x == q[0] or x == 0 for x in q) and q[0] <= decode_threshold:
        n = len(q)
    dec_tokens = sum(q[:n])
    return Split(n, len(q) - n, dec_tokens, batch.num_tokens - dec_tokens)


def cumulative(values) -> list[int]:
    return [0, *accumulate(values)]


def dcp_local_len(seq_len: int, world_size: int, rank: int, interleave: int = 1) -> int:
    """Tokens of a sequence a DCP rank holds: positions are dealt to ranks in runs of ``interleave``."""
    cycle = world_size * interleave
    return (seq_len // cycle) * interleave + min(max(seq_len % cycle - rank * interleave, 0), interleave)
