"""Test 4: random spec-decode batches through the real ``build()`` on emulated Blackwell (all TRTLLM):
reference equality, poison invariance and zero host syncs. Derandomized, so CI is deterministic."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.flashinfer.batches import make_batch
from spec_decode_ci.flashinfer.harness import poison
from spec_decode_ci.flashinfer.builder import BuilderOptions
from spec_decode_ci.sync import HostSyncSentinel

pytestmark = pytest.mark.build_path

PAGE_SIZES = (16, 32, 64)
MAX_SEQ = 4096  # BuilderOptions.max_model_len


@st.composite
def spec_decode_batches(draw, page_size: int, num_spec_tokens: int):
    """1..64 requests: decodes (1..1+k query tokens) first, then prefills; seq lens on, around and between
    page boundaries."""
    threshold = 1 + num_spec_tokens
    num_reqs = draw(st.integers(1, 64))
    num_decodes = draw(st.integers(0, num_reqs))
    uniform = draw(st.booleans())
    q_decode = draw(st.integers(1, threshold))
    query_lens = [q_decode if uniform else draw(st.integers(1, threshold)) for _ in range(num_decodes)]
    query_lens += [draw(st.integers(threshold + 1, 300)) for _ in range(num_reqs - num_decodes)]
    seq_lens = []
    for q in query_lens:
        pages = draw(st.integers(0, MAX_SEQ // page_size - 1))
        edge = draw(st.sampled_from([-1, 0, 0, 1, None]))
        seq = pages * page_size + (edge if edge is not None else draw(st.integers(0, page_size - 1)))
        seq_lens.append(min(MAX_SEQ, max(q, seq)))
    return make_batch(query_lens, seq_lens, page_size, seed=draw(st.integers(0, 2**16)))


def check_batch(harness, batch):
    split = reference.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
    poison(harness.builder, 0x5A5A5A5A)
    sentinel = HostSyncSentinel()
    first = harness.build(batch, sentinel)
    poison(harness.builder, -77)
    second = harness.build(batch)
    view = metadata_view.snapshot(first, batch)
    assert view == metadata_view.snapshot(second, batch), "metadata depends on stale buffer contents"
    assert first.syncs == [], "\n".join(map(str, first.syncs))
    assert view["counts"] == (split.num_decodes, split.num_prefills, split.num_decode_tokens, split.num_prefill_tokens)
    if split.num_prefills:
        assert view["trtllm_prefill"] == reference.trtllm_prefill(batch, split)
    if split.num_decodes:
        assert view["trtllm_decode"] == reference.trtllm_decode(batch, split)


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_random_batches(harness_cache, page_size):
    harness = harness_cache(BuilderOptions(page_size=page_size))

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(batch=spec_decode_batches(page_size, harness.options.num_spec_tokens))
    def run(batch):
        check_batch(harness, batch)

    run()
