"""Random spec-decode batches through the real ``build()`` on emulated Blackwell (all TRTLLM):
reference equality, poison invariance and zero host syncs. Derandomized, so CI is deterministic."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spec_decode_ci.buildpath import split as phases
from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.buildpath.batches import Choices, random_spec_decode_batch
from spec_decode_ci.buildpath.run import poison
from spec_decode_ci.flashinfer.builder import BuilderOptions

pytestmark = pytest.mark.build_path

PAGE_SIZES = (16, 32, 64)
MAX_SEQ = 4096  # BuilderOptions.max_model_len


class DrawnChoices(Choices):
    """The batch generator's choices drawn by Hypothesis (so failures shrink)."""

    def __init__(self, draw):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def one_of(self, options):
        return self.draw(st.sampled_from(options))


@st.composite
def spec_decode_batches(draw, page_size: int, num_spec_tokens: int):
    return random_spec_decode_batch(DrawnChoices(draw), page_size, num_spec_tokens, MAX_SEQ)


def check_batch(harness, batch):
    split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
    poison(harness.builder, 0x5A5A5A5A)
    first = harness.build(batch, watch_syncs=True)
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
def test_random_batches(build_harness, page_size):
    harness = build_harness(BuilderOptions(page_size=page_size))

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(batch=spec_decode_batches(page_size, harness.options.num_spec_tokens))
    def run(batch):
        check_batch(harness, batch)

    run()
