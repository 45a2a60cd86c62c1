"""spec_decode_ci.e2e.engine_run: what the e2e runs record from vLLM's real FlashInfer builder."""

from __future__ import annotations

import pytest

from spec_decode_ci.e2e.engine_run import BuildLog, observed_builds
from spec_decode_ci.emulation import BLACKWELL
from spec_decode_ci.buildpath.batches import spec_decode_batch

pytestmark = pytest.mark.e2e_offline


def test_mixed_batches_counted_as_scheduled_whatever_the_builder_calls_them(build_harness):
    """Speculative decode steps (1 + k tokens) beside prefill chunks are a mixed batch. With TRTLLM decode the
    builder agrees; without it (Hopper) the builder calls every decode step a prefill, and the count must not
    follow it."""
    for gpu, builder_view in [(BLACKWELL, (2, 3)), (BLACKWELL.variant(trtllm_prefill=False, trtllm_decode=False),
                                                         (5, 0))]:
        harness = build_harness(gpu=gpu)
        k = harness.options.num_spec_tokens
        log = BuildLog()
        with observed_builds(log, 1 + k):
            harness.build(spec_decode_batch(3, 2, k, harness.options.page_size, seed=3, decode_query_len=1 + k))
            harness.build(spec_decode_batch(4, 0, k, harness.options.page_size, seed=4, decode_query_len=1 + k))
        assert log.batches == [(2, 3), (0, 4)]
        assert log.builder_batches[0] == builder_view
        assert (log.mixed_batches, log.builder_mixed_batches) == (1, int(all(builder_view)))


def test_padded_requests_are_neither_prefill_nor_decode(build_harness):
    harness = build_harness()
    k = harness.options.num_spec_tokens
    batch = harness.padded(spec_decode_batch(3, 0, k, harness.options.page_size, seed=5, decode_query_len=1 + k),
                           8 * (1 + k))
    log = BuildLog()
    with observed_builds(log, 1 + k):
        harness.build(batch)
    assert log.batches == [(0, 3)]
