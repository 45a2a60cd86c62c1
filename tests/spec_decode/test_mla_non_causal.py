"""MLA's non-causal multi-token decode (a drafter's block of draft positions, each request's queries seeing one
another): a builder whose attention group flattens such a block takes a uniform block, with the zero-length
requests a CUDA-graph replay adds after it, as decodes of every token; it refuses a ragged block, a zero-length
request before a real one, and a non-causal batch for a group that never asked for one."""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import make_batch
from spec_decode_ci.mla.builder import MlaOptions

pytestmark = pytest.mark.build_path

NON_CAUSAL = MlaOptions(non_causal_multi_token_decode=True)


def non_causal(batch):
    return dataclasses.replace(batch, causal=False)


@pytest.fixture
def harness(build_harness):
    harness = build_harness(NON_CAUSAL)
    if not getattr(harness.builder, "non_causal_multi_token_decode", False):
        pytest.skip("this vLLM's MLA builder has no non-causal multi-token decode (it reads no such layer flag)")
    return harness


def block(harness, requests: int, queries: int):
    page = harness.page_size
    return make_batch([queries] * requests, [queries + page * (i + 1) - 1 for i in range(requests)], page, seed=3)


def assert_decodes(harness, batch, decodes: int, tokens: int) -> None:
    m = harness.build(batch).metadata
    assert (m.num_decodes, m.num_prefills, m.num_decode_tokens) == (decodes, 0, tokens), (
        f"expected {batch.describe()} built as {decodes} decodes of {tokens} tokens; came (decodes, prefills, "
        f"decode tokens) {(m.num_decodes, m.num_prefills, m.num_decode_tokens)}. Look: the non-causal branch of "
        f"MLA's build()")


def test_a_uniform_block_builds_as_decodes_of_every_token(harness):
    assert_decodes(harness, non_causal(block(harness, 3, 4)), 3, 12)


@pytest.mark.parametrize("runner", [compat.V1_RUNNER, compat.V2_RUNNER], ids=["V1", "V2"])
def test_a_uniform_block_with_trailing_graph_padding_builds(harness, runner):
    """3 real requests and 2 a graph replay adds, with no queries: 5 decodes of the real requests' 12 tokens."""
    if runner not in compat.shipped_runners():
        pytest.skip(f"this vLLM does not ship {runner} (it ships {', '.join(compat.shipped_runners())})")
    padding = compat.cudagraph_padding(runner)
    assert_decodes(harness, non_causal(dataclasses.replace(block(harness, 3, 4), padded_reqs=2, padding=padding)),
                   5, 12)


@pytest.mark.parametrize("query_lens", [[4, 4, 3], [4, 2, 4], [1, 4, 4]], ids=["short-last", "short-middle",
                                                                              "short-first"])
def test_a_ragged_block_is_refused(harness, query_lens):
    page = harness.page_size
    batch = non_causal(make_batch(query_lens, [q + page for q in query_lens], page, seed=4))
    with pytest.raises(ValueError, match="uniform query block"):
        harness.build(batch)


def test_a_zero_length_request_before_a_real_one_is_refused(harness):
    """Only trailing padding may have no queries: a gap before a real request is no uniform block."""
    page = harness.page_size
    real = make_batch([4, 4], [4 + page, 4 + 2 * page], page, seed=5)
    gap = dataclasses.replace(real, query_lens=(4, 0, 4), seq_lens=(4 + page, page, 4 + 2 * page),
                              block_table=(real.block_table[0], (99,), real.block_table[1]))
    with pytest.raises(ValueError, match="uniform query block"):
        harness.build(non_causal(gap))


def test_a_causal_group_refuses_a_non_causal_batch(build_harness, harness):
    causal_group = build_harness(dataclasses.replace(NON_CAUSAL, non_causal_multi_token_decode=False))
    with pytest.raises(ValueError, match="explicitly supported attention group"):
        causal_group.build(non_causal(block(causal_group, 2, 4)))
