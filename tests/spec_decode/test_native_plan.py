"""The native FlashInfer path. What the builder hands the wrappers' ``plan()`` (indptr, indices,
last-page lengths, qo indptr) describes exactly the reference pages of each request, and the model's attention
layer (heads, head size, scale, window, soft cap, dtypes)."""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci import compat
from spec_decode_ci.buildpath import split as phases
from spec_decode_ci.flashinfer import reference
from spec_decode_ci.buildpath.batches import make_batch, spec_decode_batch
from spec_decode_ci.flashinfer.builder import BuilderOptions
from spec_decode_ci.emulation import BLACKWELL
from spec_decode_ci.flashinfer.metadata_view import dtype_name, planned_attention, planned_paged_kv

pytestmark = pytest.mark.build_path

NATIVE = BLACKWELL.variant(trtllm_prefill=False, trtllm_decode=False)


def native_batches(page: int):
    """A decode-heavy batch and one with decodes and prefills at page boundaries."""
    return (spec_decode_batch(4, 3, 0, page, seed=page, decode_query_len=1),
            make_batch([1, 1, 5, 2 * page], [page, page + 1, 2 * page, 2 * page], page, seed=5))


@pytest.mark.parametrize("page", [16, 64])
def test_native_plans_match_reference(build_harness, page):
    harness = build_harness(BuilderOptions(page_size=page), NATIVE)
    for batch in native_batches(page):
        result = harness.build(batch)
        split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
        by_wrapper = {c.wrapper: c for c in result.plans}
        expected_wrappers = {"BatchPrefillWithPagedKVCacheWrapper"} if split.num_prefills else set()
        expected_wrappers |= {"BatchDecodeWithPagedKVCacheWrapper"} if split.num_decodes else set()
        assert set(by_wrapper) == expected_wrappers
        if split.num_prefills:
            call = by_wrapper["BatchPrefillWithPagedKVCacheWrapper"]
            assert planned_paged_kv(call) == reference.paged_kv(
                batch, split.num_decodes, batch.num_reqs), batch.describe()
            assert call.kwargs["page_size"] == page and call.kwargs["causal"] is True
        if split.num_decodes:
            call = by_wrapper["BatchDecodeWithPagedKVCacheWrapper"]
            assert planned_paged_kv(call) == reference.paged_kv(batch, 0, split.num_decodes)


def test_native_plans_carry_the_layers_attention(build_harness):
    """Both native wrappers are planned for the model's layer: its query and KV heads (8 and 2), head size,
    page size, 1/sqrt(head size) scale, sliding window and logits soft cap, bf16 query, KV cache and output; the
    prefill causal, the decode without FlashInfer's own RoPE."""
    options = dataclasses.replace(BuilderOptions(), window_left=127, logits_soft_cap=30.0)
    harness = build_harness(options, NATIVE)
    layer = reference.layer_attention(options.num_heads, options.num_kv_heads, options.head_size, options.page_size,
                                      options.window_left, options.logits_soft_cap)
    planned = set()
    for batch in native_batches(options.page_size):
        for call in harness.build(batch).plans:
            planned.add(call.wrapper)
            assert planned_attention(call) == layer, (call.wrapper, batch.describe())
            if "o_data_type" in call.kwargs:
                assert dtype_name(call.kwargs["o_data_type"]) == layer.q_data_type, call.wrapper
            if call.wrapper == "BatchPrefillWithPagedKVCacheWrapper":
                assert call.kwargs["causal"] is True
            else:
                assert call.kwargs.get("pos_encoding_mode", "NONE") == "NONE", call.wrapper
    assert planned == {"BatchPrefillWithPagedKVCacheWrapper", "BatchDecodeWithPagedKVCacheWrapper"}


@pytest.mark.parametrize("page", [16, 64])
def test_non_causal_batch_is_planned_non_causal_for_every_request(build_harness, page):
    """A DFlash drafter's batch attends both ways within each request's queries. On Blackwell, whose TRTLLM
    kernels are causal, build() hands TRTLLM nothing and plans every request in one native non-causal prefill
    over its reference pages."""
    harness = build_harness(BuilderOptions(page_size=page), BLACKWELL)
    if not compat.flashinfer_attends_non_causally(harness.module):
        pytest.skip(compat.NO_NON_CAUSAL_PATH)
    k = harness.options.num_spec_tokens
    for batch in (dataclasses.replace(spec_decode_batch(4, 0, k, page, seed=page), causal=False),
                  dataclasses.replace(spec_decode_batch(3, 2, k, page, seed=page + 1), causal=False)):
        result = harness.build(batch)
        m = result.metadata
        assert (m.num_decodes, m.num_prefills, m.decode) == (0, batch.num_reqs, None), batch.describe()
        assert [c.wrapper for c in result.plans] == ["BatchPrefillWithPagedKVCacheWrapper"], batch.describe()
        assert type(getattr(m.prefill, "wrapper", None)).__name__ == "BatchPrefillWithPagedKVCacheWrapper", (
            f"the prefill runs {type(m.prefill).__name__}, not the native wrapper planned", batch.describe())
        call = result.plans[0]
        assert call.kwargs["causal"] is False, batch.describe()
        assert planned_paged_kv(call) == reference.paged_kv(batch, 0, batch.num_reqs), batch.describe()
