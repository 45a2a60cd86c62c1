"""The native FlashInfer path. What the builder hands the wrappers' ``plan()`` (indptr, indices,
last-page lengths, qo indptr) describes exactly the reference pages of each request."""

from __future__ import annotations

import pytest

from spec_decode_ci.buildpath import split as phases
from spec_decode_ci.flashinfer import reference
from spec_decode_ci.buildpath.batches import make_batch, spec_decode_batch
from spec_decode_ci.flashinfer.builder import BuilderOptions
from spec_decode_ci.emulation import EmulatedGpu
from spec_decode_ci.flashinfer.metadata_view import planned_paged_kv

pytestmark = pytest.mark.build_path

NATIVE = EmulatedGpu(trtllm_prefill=False, trtllm_decode=False)


@pytest.mark.parametrize("page", [16, 64])
def test_native_plans_match_reference(build_harness, page):
    harness = build_harness(BuilderOptions(page_size=page), NATIVE)
    for batch in (spec_decode_batch(4, 3, 0, page, seed=page, decode_query_len=1),
                  make_batch([1, 1, 5, 2 * page], [page, page + 1, 2 * page, 2 * page], page, seed=5)):
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
