"""Decode context parallel, each rank of groups of 2 and 4 (emulated at the process-group boundary): what the
kernels are given describes the rank's own share of each sequence (rank-local lengths, page counts, indptr,
last-page lengths) attended by the group's all-gathered query heads, the combine gets each decode's query
offsets, and the shared ``CommonAttentionMetadata`` is left as it was.

vLLM shipped both halves of this wrong: prefill context lengths written into the shared host ``seq_lens`` in
place, and page counts taken from the global lengths instead of the rank-local ones.
"""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci.buildpath import split as phases
from spec_decode_ci.emulation import BLACKWELL
from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.buildpath.batches import make_batch, spec_decode_batch
from spec_decode_ci.flashinfer.builder import BuilderOptions
from spec_decode_ci.flashinfer.isolation import metadata_changes, metadata_fields
from spec_decode_ci.flashinfer.metadata_view import planned_paged_kv

pytestmark = pytest.mark.build_path

RANKS = [(world, rank) for world in (2, 4) for rank in range(world)]


def batches(harness):
    k, page, q = harness.options.num_spec_tokens, harness.options.page_size, harness.decode_threshold
    yield "mixed", spec_decode_batch(3, 3, k, page, seed=41, decode_query_len=q)
    yield "decode-only", spec_decode_batch(4, 0, k, page, seed=42, decode_query_len=q)
    yield "prefill-only", spec_decode_batch(0, 3, k, page, seed=43)
    # short sequences: some ranks hold nothing of them
    yield "short", make_batch([q, q + 1], [q, q + 2], page, seed=44)


@pytest.mark.parametrize("decode", ["trtllm", "native"])
@pytest.mark.parametrize("world,rank", RANKS, ids=[f"world{w}-rank{r}" for w, r in RANKS])
def test_rank_local_metadata(build_harness, world, rank, decode):
    check_rank(build_harness, BuilderOptions(dcp_world_size=world, dcp_rank=rank), decode)


@pytest.mark.parametrize("decode", ["trtllm", "native"])
@pytest.mark.parametrize("rank", [0, 1])
def test_rank_local_metadata_without_speculation(build_harness, rank, decode):
    """Without draft tokens the runner's host seq lens are exact and the builder reads them directly: the
    shared buffer is then the one a careless in-place adjustment would write into."""
    check_rank(build_harness, BuilderOptions(dcp_world_size=2, dcp_rank=rank, num_spec_tokens=0), decode)


def check_rank(build_harness, options: BuilderOptions, decode: str) -> None:
    world, rank = options.dcp_world_size, options.dcp_rank
    # TRTLLM prefill is never chosen under DCP: the prefill runs the native DCP context pass.
    gpu = BLACKWELL.variant(trtllm_prefill=False, trtllm_decode=decode == "trtllm")
    harness = build_harness(options, gpu)
    assert harness.builder.dcp_world_size == world and harness.builder.dcp_rank == rank
    interleave = harness.builder.dcp_kv_cache_interleave_size

    def local(lens):
        return [phases.dcp_local_len(s, world, rank, interleave) for s in lens]

    for name, batch in batches(harness):
        before = metadata_fields(harness.device_batch(batch).common)
        result = harness.build(batch)
        changes = metadata_changes(before, result.device_batch.common, harness.device_batch(batch).common)
        assert not changes, f"{name}: build() changed the shared metadata:\n" + "\n".join(changes)

        split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
        m, n = result.metadata, split.num_decodes
        plans = {c.wrapper: c for c in result.plans}
        # A pass over the rank's share of the cache attends with the queries of the whole group (all-gathered:
        # every rank's heads) and hands its partial results to the group's combine.
        group_heads = options.num_heads * world
        if n and decode == "trtllm":
            assert metadata_view.as_list(m.decode.seq_lens) == local(batch.seq_lens[:n]), (name, batch.describe())
            assert metadata_view.trtllm_decode(result, batch).block_tables == [list(r) for r in batch.block_table[:n]]
            if "dcp_query_start_loc" in {f.name for f in dataclasses.fields(m.decode)}:  # the combine's offsets
                assert metadata_view.as_list(m.decode.dcp_query_start_loc) == phases.cumulative(
                    batch.query_lens[:n]), (name, batch.describe())
        elif n:
            call = plans["BatchDecodeWithPagedKVCacheWrapper"]
            planned = planned_paged_kv(call)
            expected = reference.paged_kv(batch, 0, n, local(batch.seq_lens[:n]))
            assert (planned.pages, planned.last_page_len) == (expected.pages, expected.last_page_len), (
                name, batch.describe())
            assert call.kwargs["num_qo_heads"] == group_heads, name
        if split.num_prefills:
            contexts = [s - q for q, s in zip(batch.query_lens[n:], batch.seq_lens[n:])]
            context_pass = plans["BatchPrefillWithPagedKVCacheWrapper"]
            expected = reference.paged_kv(batch, n, batch.num_reqs, local(contexts))
            assert planned_paged_kv(context_pass) == expected, (name, batch.describe())
            assert context_pass.kwargs["num_qo_heads"] == group_heads, name
            new_tokens = plans["BatchPrefillWithRaggedKVCacheWrapper"].kwargs  # the new tokens attend to themselves
            queries = phases.cumulative(batch.query_lens[n:])
            assert metadata_view.as_list(new_tokens["qo_indptr"]) == queries
            assert metadata_view.as_list(new_tokens["kv_indptr"]) == queries
            assert new_tokens["num_qo_heads"] == options.num_heads, name  # the rank's own heads, its own tokens


def test_local_lengths_deal_every_token_to_one_rank():
    for world in (2, 4):
        for interleave in (1, 16):
            for seq_len in (0, 1, 5, 16, 17, 63, 64, 65, 1000):
                shares = [phases.dcp_local_len(seq_len, world, r, interleave) for r in range(world)]
                assert sum(shares) == seq_len and max(shares) - min(shares) <= interleave
