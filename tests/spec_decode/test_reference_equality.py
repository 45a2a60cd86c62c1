"""Every TRTLLM field equals a value computed independently from the batch."""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci.buildpath import split as phases
from spec_decode_ci import compat
from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.buildpath.batches import make_batch, spec_decode_batch
from spec_decode_ci.flashinfer.builder import BuilderOptions

pytestmark = pytest.mark.build_path

PAGE_SIZES = [16, 32, 64]


def batches(page: int, k: int):
    q = 1 + k
    yield "mixed", spec_decode_batch(3, 3, k, page, seed=page)
    yield "prefill-only", spec_decode_batch(0, 4, k, page, seed=page + 1)
    yield "decode-only", spec_decode_batch(5, 0, k, page, seed=page + 2)
    # seq lens at, just under and just over page boundaries, for decodes and prefills alike
    yield "page-boundaries", make_batch([q, q, q, q + 1, q + 9, 2 * page],
                                        [page, page + 1, 2 * page - 1, page, 3 * page + 1, 2 * page], page, seed=3)
    yield "single-prefill", make_batch([q + 1], [q + 1], page)
    # one decode alone, and one beside prefills: a batch of one request is where tokens / requests and the
    # request's own query length coincide
    yield "single-decode", spec_decode_batch(1, 0, k, page, seed=page + 3)
    yield "single-decode-mixed", spec_decode_batch(1, 2, k, page, seed=page + 4)


@pytest.mark.parametrize("page", PAGE_SIZES)
def test_trtllm_fields_equal_reference(build_harness, page):
    harness = build_harness(BuilderOptions(page_size=page))
    for name, batch in batches(page, harness.options.num_spec_tokens):
        assert_trtllm_fields_equal_reference(harness, build_without_warnings(harness, batch, name), batch, name)


def build_without_warnings(harness, batch, name: str):
    """``harness.build(batch)``, which must warn of nothing: torch warns where build() writes a result through a view
    of a persistent buffer of another shape (out= resizes it), which a CUDA graph's replay does not follow."""
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = harness.build(batch)
    messages = sorted({str(w.message).splitlines()[0][:200] for w in said})
    assert not messages, f"{name}: expected build() to warn of nothing; came {messages}. Look: out= views in build()"
    return result


@pytest.mark.parametrize("k", [1, 2])
def test_trtllm_fields_equal_reference_with_fewer_drafts(build_harness, k):
    """As above with 1 and 2 speculative tokens (MTP's usual 1): decodes of 2 and 3 query tokens."""
    harness = build_harness(BuilderOptions(num_spec_tokens=k))
    for name, batch in batches(harness.options.page_size, k):
        assert_trtllm_fields_equal_reference(harness, harness.build(batch), batch, name)


# FP8 KV caches on Blackwell: read by an FP8 query (vLLM's default, which only TRTLLM runs), or by a bf16 query with
# TRTLLM asked for (its prefill then dequantizes the pages of the block-table columns it is handed).
FP8_KV_CACHES = [pytest.param(BuilderOptions(kv_cache_dtype="fp8"), id="fp8-query"),
                 pytest.param(BuilderOptions(kv_cache_dtype="fp8", quantize_query=False, force_trtllm=True),
                              id="bf16-query")]


@pytest.mark.parametrize("options", FP8_KV_CACHES)
@pytest.mark.parametrize("page", [16, 64])
def test_fp8_kv_cache_stays_on_trtllm_without_host_sync(build_harness, options, page):
    """With an FP8 KV cache both phases run on TRTLLM, build() never waits on the GPU, and every TRTLLM field
    equals the reference (block tables included: each request's pages, however few columns the prefill gets)."""
    harness = build_harness(dataclasses.replace(options, page_size=page))
    for name, batch in batches(page, harness.options.num_spec_tokens):
        result = harness.build(batch, watch_syncs=True)
        m = result.metadata
        assert {type(m.prefill).__name__, type(m.decode).__name__} <= {
            compat.TRTLLM_PREFILL_CLASS, harness.trtllm_decode_class, "NoneType"}, (name, type(m.prefill), type(m.decode))
        assert result.syncs == [], f"{name}: build() synced:\n" + "\n".join(map(str, result.syncs))
        assert_trtllm_fields_equal_reference(harness, result, batch, name)
        tables = getattr(m.prefill, "block_tables", None)
        assert tables is None or tables.is_contiguous(), (
            f"{name}: expected the prefill's block tables contiguous (the dequantizing prefill indexes rows by "
            f"their logical width); came shape {tuple(tables.shape)}, strides {tables.stride()}")


def assert_trtllm_fields_equal_reference(harness, result, batch, name: str) -> None:
    """The batch's split as the builder reports it, and each TRTLLM phase's fields, equal the reference's."""
    split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
    m = result.metadata
    assert (m.num_decodes, m.num_prefills, m.num_decode_tokens, m.num_prefill_tokens) == (
        split.num_decodes, split.num_prefills, split.num_decode_tokens, split.num_prefill_tokens), name
    if split.num_prefills:
        assert metadata_view.trtllm_prefill(result, batch) == reference.trtllm_prefill(batch, split), (
            name, batch.describe())
    else:
        assert m.prefill is None, name
    if split.num_decodes:
        assert metadata_view.trtllm_decode(result, batch) == reference.trtllm_decode(batch, split), name
        assert_decode_queries_read_where_they_are(harness, m, batch, split.num_decodes, name)
    else:
        assert m.decode is None, name


def assert_decode_queries_read_where_they_are(harness, m, batch, num_decodes: int, name: str) -> None:
    """The TRTLLM decode kernel reads each decode request's own query rows (its offsets, or the uniform query
    length it is told), its offsets one per request and one more, and a query length no request exceeds."""
    bounds = phases.cumulative(batch.query_lens[:num_decodes])
    want = [(bounds[i], bounds[i + 1]) for i in range(num_decodes)]
    ranges = compat.decode_query_ranges(m)
    assert ranges == want, (f"{name}: expected the decode kernel to read the query rows {want}; came {ranges}. Look: "
                            f"q_cu_seq_lens / q_len_per_req in build() and _compute_decode_query_lens")
    off = metadata_view.decode_offsets_off(m)
    assert off is None, f"{name}: {off}"
    q_len = compat.decode_query_len_per_request(m.decode)
    if q_len is not None:
        longest = max(batch.query_lens[:num_decodes])
        assert longest <= q_len <= harness.decode_threshold, (
            f"{name}: expected the decode's query length per request between the longest decode ({longest}) and "
            f"1 + k ({harness.decode_threshold}); came {q_len}")


def trimmed_drafts(page: int, k: int):
    """Decodes whose drafts adaptive verification trimmed (fewer than k), alone and beside prefills."""
    yield "trimmed-decodes", make_batch([k + 1, 2, k, 1], [page + 3, 2 * page, 3 * page - 1, page], page, seed=11)
    yield "short-decodes-only", make_batch([2, 2, 1], [page, page + 5, 2 * page + 1], page, seed=12)
    yield "trimmed-mixed", make_batch([2, k + 1, k + 5, 2 * page], [page + 2, 2 * page, 3 * page, 2 * page], page,
                                      seed=13)


def test_adaptive_verification_reads_each_requests_queries(build_harness):
    """With adaptive verification (DSpark's) drafts are trimmed on the device: TRTLLM-gen decode takes each
    request's query offsets, and a query length bound no trimmed request exceeds, beside every TRTLLM field."""
    if not compat.has_adaptive_verification():
        pytest.skip("this vLLM has no adaptive verification (SpeculativeConfig.enable_adaptive_verification)")
    harness = build_harness(BuilderOptions(adaptive_verification=True))
    page, k = harness.options.page_size, harness.options.num_spec_tokens
    for name, batch in [*batches(page, k), *trimmed_drafts(page, k)]:
        result = harness.build(batch)
        assert_trtllm_fields_equal_reference(harness, result, batch, name)
        offsets = getattr(result.metadata.decode, "q_cu_seq_lens", None)
        if result.metadata.num_decodes:
            assert offsets is not None, (f"{name}: expected TRTLLM-gen decode told the device's query offsets under "
                                         f"adaptive verification (a graph captured uniform replays trimmed drafts); "
                                         f"came none. Look: build()'s use_trtllm_gen_varlen_decode branch")


def test_reference_split_matches_the_runner_layout():
    batch = make_batch([4, 4, 4, 9, 2], [10, 20, 30, 40, 50], 16)
    assert phases.split(batch, 4, require_uniform=True) == phases.Split(3, 2, 12, 11)
    assert phases.split(batch, 4, require_uniform=False) == phases.Split(3, 2, 12, 11)
    ragged = make_batch([4, 2, 9], [10, 20, 40], 16)
    assert phases.split(ragged, 4, require_uniform=True).num_decodes == 1
    assert phases.split(ragged, 4, require_uniform=False).num_decodes == 2
