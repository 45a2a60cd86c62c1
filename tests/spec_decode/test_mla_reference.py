"""spec_decode_ci.mla.reference: the context a prefill must gather, and chunk ranges read back so that a gap,
an overlap or a repeat cannot look like full coverage."""

from __future__ import annotations

from spec_decode_ci.buildpath.batches import make_batch
from spec_decode_ci.buildpath.split import split
from spec_decode_ci.mla import reference


def test_expected_context_is_each_prefills_tokens_before_its_queries():
    batch = make_batch([4, 20, 9], [70, 20, 300], 32)
    out = reference.expected(batch, split(batch, 4, True))
    assert out["counts"] == (1, 2, 4)
    assert out["prefill"]["context"] == [[], [(0, 291)]]
    assert out["prefill"]["query_start_loc"] == [0, 20, 29]
    assert out["decode"] == {"seq_lens": [70], "pages": [list(batch.block_table[0])]}


def test_chunk_ranges_merge_only_when_contiguous():
    assert reference._merged([(0, 256), (256, 35), (291, 0)]) == [(0, 291)]
    assert reference._merged([(0, 256), (300, 10)]) == [(0, 256), (300, 10)]  # a gap stays visible
    assert reference._merged([(0, 256), (0, 256)]) == [(0, 256), (0, 256)]  # a repeat stays visible
