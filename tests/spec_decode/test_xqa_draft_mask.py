"""Speculative decodes on Hopper (H100/H200): vLLM runs them on FlashInfer's XQA kernel, which reads which draft
tokens each query token may attend from a packed draft-block mask the builder makes. A wrong bit there is
silently wrong attention for every drafted token; the mask must match an independent one, row per query token:
causal within each request's drafts for a causal model, all of its drafts for a non-causal (DFlash) drafter,
nothing past a request's own query length.
"""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import cdiv, make_batch, spec_decode_batch
from spec_decode_ci.buildpath.split import cumulative, split
from spec_decode_ci.emulation import HOPPER
from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.flashinfer.builder import BuilderOptions

pytestmark = pytest.mark.build_path


def xqa_harness(build_harness, non_causal: bool = False, num_spec_tokens: int = 3):
    harness = build_harness(BuilderOptions(non_causal=non_causal, num_spec_tokens=num_spec_tokens), HOPPER)
    if not getattr(harness.builder, "use_xqa", False):
        pytest.skip("this vLLM's FlashInfer builder runs no XQA decode on Hopper (use_xqa)")
    return harness


def decode_batches(harness):
    """(name, batch): uniform spec decodes, decodes before prefills, and decodes of different query lengths
    (where this vLLM's builder takes them ragged)."""
    k, page = harness.options.num_spec_tokens, harness.options.page_size
    yield "uniform", spec_decode_batch(4, 0, k, page, seed=21)
    yield "mixed", spec_decode_batch(3, 2, k, page, seed=22)
    if compat.decodes_may_be_ragged(harness.builder):
        yield "ragged", make_batch([1 + k, 2, 1 + k, 3], [37, 18, 70, 5], page, seed=23)
        yield "ragged-mixed", make_batch([1 + k, 2, 1 + k, k + 6, 2 * page], [37, 18, 70, k + 6, 3 * page], page,
                                         seed=24)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "non-causal"])
def test_xqa_draft_mask_lets_each_query_see_its_requests_drafts(build_harness, causal):
    """Every decode's rows of XQA's draft mask, for causal and non-causal batches on Hopper, against the
    reference mask of the decodes' query lengths (FlashInfer's width: 32 columns per packed word); and the query
    tokens XQA reads for each decode are that request's own."""
    assert_xqa_masks_match_the_reference(build_harness, causal, 3)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "non-causal"])
def test_xqa_draft_mask_with_one_speculative_token(build_harness, causal):
    """As above with 1 speculative token (MTP's usual): decodes of 2 query tokens."""
    assert_xqa_masks_match_the_reference(build_harness, causal, 1)


def assert_xqa_masks_match_the_reference(build_harness, causal: bool, k: int) -> None:
    if not causal and not compat.flashinfer_attends_non_causally(build_harness(BuilderOptions(), HOPPER).module):
        pytest.skip(compat.NO_NON_CAUSAL_PATH)
    harness = xqa_harness(build_harness, non_causal=not causal, num_spec_tokens=k)
    for name, batch in decode_batches(harness):
        batch = dataclasses.replace(batch, causal=causal)
        m = harness.build(batch).metadata
        s = split(batch, harness.decode_threshold, harness.require_uniform_decodes)
        assert (m.num_decodes, metadata_view.decode_on_trtllm(m)) == (s.num_decodes, True), (
            name, batch.describe(), type(m.decode).__name__)
        query_lens = list(batch.query_lens[:s.num_decodes])
        expected = reference.draft_block_mask(query_lens, causal, 32 * cdiv(max(query_lens), 32))
        assert metadata_view.xqa_draft_mask(m.decode) == expected, (name, batch.describe())
        mask = getattr(m.decode, "mask", None)
        assert mask is None or mask.is_contiguous(), (
            f"{name}: expected the draft mask XQA reads as packed words in one contiguous block; came strides "
            f"{mask.stride()}. Look: _get_decode_mask")
        start = cumulative(query_lens)
        assert compat.decode_query_ranges(m) == list(zip(start, start[1:])), (
            f"{name}: XQA would read the query tokens {compat.decode_query_ranges(m)}", batch.describe())
        off = metadata_view.decode_offsets_off(m)
        assert off is None, f"{name}: {off} ({batch.describe()})"


def test_xqa_uniform_draft_mask_is_one_buffer_build_after_build(build_harness):
    """A uniform batch's mask is a slice of one buffer the builder keeps per query length: a CUDA graph captured
    on one build replays the mask's address, so a new buffer on a later build would leave it reading the old."""
    harness = xqa_harness(build_harness)
    k, page = harness.options.num_spec_tokens, harness.options.page_size
    masks = [getattr(harness.build(spec_decode_batch(n, 0, k, page, seed=n)).metadata.decode, "mask", None)
             for n in (4, 2, 4)]
    if any(m is None for m in masks):
        pytest.skip("this vLLM's XQA decode takes no draft mask")
    pointers = [m.data_ptr() for m in masks]
    assert len(set(pointers)) == 1, (
        f"expected the uniform batches' XQA draft masks at one address (a persistent buffer); came {pointers}. "
        f"Look: _get_decode_mask's cache in FlashInferMetadataBuilder")
