"""Batches padded to a CUDA-graph capture size, as vLLM's runner hands them to ``build()``: zero-length requests
after a uniform spec-decode batch, padded tokens after a mixed one. ``build()`` must accept them, and the TRTLLM
fields must let the kernels read exactly the real requests' queries and pages (vLLM issues #31594, #32626,
#33450: the decode query length was derived from tokens / requests, or asserted on).
"""

from __future__ import annotations

import pytest

from spec_decode_ci.buildpath import split as phases
from spec_decode_ci import compat
from spec_decode_ci.emulation import BLACKWELL, HOPPER
from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.buildpath.batches import make_batch, padded_to_cuda_graph, spec_decode_batch

pytestmark = pytest.mark.build_path


# The one site in build() where these batches may sync: on Hopper, decodes the builder sees as ragged (V1's
# capped replays: decodes alone, more padded tokens than the padded requests hold) take XQA's ragged draft-mask
# path, which copies host data to the device and calls repeat_interleave without an output size (vLLM 0.33;
# on Blackwell the same batches stay free of syncs).
XQA_RAGGED_DRAFT_MASK = "_make_xqa_ragged_draft_block_mask"


def padded_batches(harness, runner: str | None = None):
    """(name, batch) padded as ``runner`` pads (None: the one vLLM picks for the harness's config): uniform
    decodes padded by 1..5 requests, or to more tokens than ``max_num_seqs`` requests of 1 + k hold (the request
    count is capped, so on V1 tokens / requests is not 1 + k); mixed batches padded by a few tokens (on V2 they
    run piecewise, unpadded)."""
    k, page, max_num_seqs = harness.options.num_spec_tokens, harness.options.page_size, harness.options.max_num_seqs
    q = 1 + k
    for real, padded_reqs in [(1, 1), (3, 1), (3, 5), (6, 2), (2, 6)]:
        batch = spec_decode_batch(real, 0, k, page, seed=real + 10 * padded_reqs)
        yield f"decodes={real}+{padded_reqs}", harness.padded(batch, (real + padded_reqs) * q, runner)
    for real in (max_num_seqs - 4, max_num_seqs - 1):
        batch = spec_decode_batch(real, 0, k, page, seed=real)
        yield f"decodes={real}-capped", harness.padded(batch, (max_num_seqs + 20) * q, runner)
    mixed = spec_decode_batch(3, 2, k, page, seed=4)
    yield "mixed+tokens", harness.padded(mixed, mixed.num_tokens + 5, runner)
    boundary = make_batch([q, q], [page, page + 1], page, seed=9)
    yield "page-boundary-decodes+1", harness.padded(boundary, 3 * q, runner)


def real_query_ranges(batch, num_decodes: int) -> list[tuple[int, int]]:
    start = phases.cumulative(batch.query_lens)
    return [(start[i], start[i + 1]) for i in range(min(num_decodes, batch.num_reqs))]


def shipped(runner: str) -> str:
    """``runner``, where this vLLM ships it; else the test skips."""
    if runner not in compat.shipped_runners():
        pytest.skip(f"this vLLM does not ship {runner} (it ships {', '.join(compat.shipped_runners())})")
    return runner


@pytest.mark.parametrize("gpu", [BLACKWELL, HOPPER], ids=["sm100", "sm90"])
@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("runner", [compat.V1_RUNNER, compat.V2_RUNNER], ids=["V1", "V2"])
def test_padded_batches_describe_exactly_the_real_requests(build_harness, runner, page, gpu):
    """Batches padded as each runner this vLLM ships pads them (the one vLLM picks for the tier's model and
    the other): build() describes exactly the real requests to the kernels."""
    from spec_decode_ci.flashinfer.builder import BuilderOptions

    assert_padded_batches_describe_the_real_requests(build_harness(BuilderOptions(page_size=page), gpu), runner, gpu)


@pytest.mark.parametrize("gpu", [BLACKWELL, HOPPER], ids=["sm100", "sm90"])
@pytest.mark.parametrize("k", [0, 1], ids=["no-drafts", "one-draft"])
@pytest.mark.parametrize("runner", [compat.V1_RUNNER, compat.V2_RUNNER], ids=["V1", "V2"])
def test_padded_batches_with_fewer_drafts_describe_exactly_the_real_requests(build_harness, runner, k, gpu):
    """As above with one-token decodes (no speculation) and with MTP's usual single draft: padded requests beside
    decodes of 1 and 2 query tokens (TRTLLM-gen decode on Blackwell, XQA on Hopper)."""
    from spec_decode_ci.flashinfer.builder import BuilderOptions

    assert_padded_batches_describe_the_real_requests(build_harness(BuilderOptions(num_spec_tokens=k), gpu), runner,
                                                     gpu)


def assert_padded_batches_describe_the_real_requests(harness, runner: str, gpu) -> None:
    """build() describes exactly the real requests of each of ``padded_batches`` to the kernels."""
    for name, batch in padded_batches(harness, shipped(runner)):
        result = harness.build(batch, watch_syncs=True)  # an assertion in build() fails here, with the batch
        m = result.metadata
        real = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
        assert m.num_prefills == real.num_prefills, name
        # padded tokens ride with the prefill tokens (num_actual_tokens counts them), never with real decodes
        assert m.num_prefill_tokens in (real.num_prefill_tokens, real.num_prefill_tokens + batch.padded_tokens), name
        assert m.num_decodes in (real.num_decodes, real.num_decodes + batch.padded_reqs), name
        all_trtllm = metadata_view.all_phases_on_trtllm(m)
        assert all_trtllm or gpu is not BLACKWELL, (name, type(m.prefill).__name__, type(m.decode).__name__)
        if all_trtllm:  # Hopper's native prefill plans from host seq_lens: a sync there is vLLM's design
            q = 1 + harness.options.num_spec_tokens
            ragged_decodes = gpu is HOPPER and not real.num_prefills and batch.padded_tokens > batch.padded_reqs * q
            syncs = [s for s in result.syncs if not (ragged_decodes and s.function == XQA_RAGGED_DRAFT_MASK)]
            assert syncs == [], f"{name}: " + "\n".join(map(str, syncs))
        if real.num_prefills and metadata_view.prefill_on_trtllm(m):
            assert metadata_view.trtllm_prefill(result, batch) == reference.trtllm_prefill(batch, real), (
                name, batch.describe())
        if not real.num_decodes:
            continue
        ranges = compat.decode_query_ranges(m)
        assert ranges[:real.num_decodes] == real_query_ranges(batch, real.num_decodes), (
            f"{name}: the decode kernel would read queries {ranges} for {batch.describe()}")
        off = metadata_view.decode_offsets_off(m)
        assert off is None, f"{name}: {off}"
        seq_lens = metadata_view.as_list(m.decode.seq_lens)
        assert seq_lens[:real.num_decodes] == list(batch.seq_lens[:real.num_decodes]), name
        assert all(s == batch.padding.seq_len for s in seq_lens[real.num_decodes:]), name
        view = metadata_view.trtllm_decode(result, batch)
        assert view.block_tables == reference.trtllm_decode(batch, real).block_tables, name


def test_padding_follows_the_runner(build_harness):
    """The padded layout: zero-length requests and padded tokens filled as this vLLM's runner fills them."""
    from spec_decode_ci.buildpath.batches import common_attn_metadata

    import torch

    harness = build_harness()
    pad = harness.cudagraph_padding
    assert pad.runner in (compat.V1_RUNNER, compat.V2_RUNNER)
    batch = padded_to_cuda_graph(make_batch([4, 4, 4], [20, 5, 33], 16), 20, 4, 64, pad)
    assert (batch.padded_reqs, batch.padded_tokens) == (2, 8)
    common = common_attn_metadata(batch, torch.device("cpu"), 8).common
    assert common.query_start_loc_cpu.tolist() == [0, 4, 8, 12, 12, 12]
    assert common.num_reqs == 5 and common.num_actual_tokens == 20
    assert common.seq_lens.tolist() == [20, 5, 33, pad.seq_len, pad.seq_len]
    assert (common.block_table_tensor[3:] == pad.block_id).all() and common.slot_mapping[12:].eq(pad.slot).all()


def test_host_upper_bound_runs_ahead_of_decodes_only_under_speculation(build_harness):
    """The host upper bound of ``seq_lens`` the runner gives build(): ahead of each decode's real length by up to
    k (drafts rejected) under async speculative decoding, exact for prefills, padded requests and without drafts."""
    from spec_decode_ci.flashinfer.builder import BuilderOptions

    harness = build_harness()
    k = harness.options.num_spec_tokens
    mixed = spec_decode_batch(5, 2, k, 16, seed=3)
    for batch in (mixed, harness.padded(spec_decode_batch(5, 0, k, 16), 7 * (1 + k))):
        common = harness.device_batch(batch).common
        ahead = (common.seq_lens_cpu_upper_bound - common.seq_lens.cpu()).tolist()  # the host bound and the device lens
        assert k > 0 and all(0 <= a <= k for a in ahead[:5]) and any(ahead[:5]), (ahead, batch.describe())
        assert len(ahead) == 5 + 2 * (batch is mixed) + batch.padded_reqs, (ahead, batch.describe())
        assert ahead[5:] == [0] * (len(ahead) - 5), (ahead, batch.describe())  # prefills, padded requests
    no_drafts = build_harness(BuilderOptions(num_spec_tokens=0))
    common = no_drafts.device_batch(spec_decode_batch(5, 2, 0, 16, seed=3)).common
    assert common.seq_lens_cpu_upper_bound.tolist() == common.seq_lens.tolist()


@pytest.mark.parametrize("runner,mixed,capped", [(compat.V1_RUNNER, (0, 3), (1, 12)), (compat.V2_RUNNER, (0, 0), (1, 4))],
                         ids=["v1", "v2"])
def test_each_runner_pads_by_its_own_rule(runner, mixed, capped):
    """V1 pads a mixed batch's tokens and replays a capped uniform graph with all its tokens; V2 runs a mixed
    FlashInfer batch piecewise (unpadded) and its uniform graphs hold requests x (1 + k) tokens."""
    pad = compat.CudaGraphPadding(runner, seq_len=0, block_id=0, slot=-1)
    assert pad.padded_counts([4, 4, 4], 20, 4, 64) == (2, 8)
    assert pad.padded_counts([4, 9], 16, 4, 64) == mixed
    assert pad.padded_counts([4] * 3, 24, 4, 4) == capped
    with pytest.raises(ValueError, match="multiple of 4"):
        pad.padded_counts([4, 4], 10, 4, 64)
