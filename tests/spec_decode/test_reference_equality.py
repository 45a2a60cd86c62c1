"""Every TRTLLM field equals a value computed independently from the batch."""

from __future__ import annotations

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


@pytest.mark.parametrize("page", PAGE_SIZES)
def test_trtllm_fields_equal_reference(build_harness, page):
    harness = build_harness(BuilderOptions(page_size=page))
    k = harness.options.num_spec_tokens
    for name, batch in batches(page, k):
        result = harness.build(batch)
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
            q_len = compat.decode_query_len_per_request(m.decode)
            if q_len is not None:
                assert q_len == batch.query_lens[0], name
        else:
            assert m.decode is None, name


def test_reference_split_matches_the_runner_layout():
    batch = make_batch([4, 4, 4, 9, 2], [10, 20, 30, 40, 50], 16)
    assert phases.split(batch, 4, require_uniform=True) == phases.Split(3, 2, 12, 11)
    assert phases.split(batch, 4, require_uniform=False) == phases.Split(3, 2, 12, 11)
    ragged = make_batch([4, 2, 9], [10, 20, 40], 16)
    assert phases.split(ragged, 4, require_uniform=True).num_decodes == 1
    assert phases.split(ragged, 4, require_uniform=False).num_decodes == 2
