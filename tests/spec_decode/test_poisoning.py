"""Poisoning differential. Fill every persistent buffer the builder owns with garbage before
``build()``, twice with different patterns: what the kernels are handed must not change, and must equal
the reference.

PR #39546's second bug read ``cum_seq_lens_kv`` from ``paged_kv_indptr.gpu`` without refreshing it for the
batch; here that read returns the poison. Buffers are discovered by walking the builder, not listed by
hand, so a persistent buffer added later is covered too.
"""

from __future__ import annotations

import pytest

from spec_decode_ci.buildpath import split as phases
from spec_decode_ci.flashinfer import metadata_view, reference
from spec_decode_ci.buildpath.batches import spec_decode_batch
from spec_decode_ci.buildpath.run import persistent_buffers, poison
from spec_decode_ci.emulation import BLACKWELL

pytestmark = pytest.mark.build_path

POISON_A, POISON_B = 0x5A5A5A5A, -77


def poisoned_snapshot(harness, batch, pattern):
    filled = poison(harness.builder, pattern)
    return metadata_view.snapshot(harness.build(batch), batch), filled


def test_discovery_finds_device_and_host_buffers(build_harness):
    found = {path: on_device for path, _, on_device in persistent_buffers(build_harness().builder)}
    assert any(found.values()) and not all(found.values()), found
    assert found.get("paged_kv_indptr.gpu") is True  # the buffer of the PR's stale read, found by the walk


@pytest.mark.parametrize("prefill,decode", [("trtllm", "trtllm"), ("native", "trtllm"), ("native", "native"),
                                            ("trtllm", "native")])
def test_poison_does_not_reach_the_kernels(build_harness, prefill, decode):
    harness = build_harness(gpu=BLACKWELL.variant(trtllm_prefill=prefill == "trtllm", trtllm_decode=decode == "trtllm"))
    batch = spec_decode_batch(3, 3, harness.options.num_spec_tokens, harness.options.page_size, seed=11,
                              decode_query_len=harness.decode_threshold)
    first, filled = poisoned_snapshot(harness, batch, POISON_A)
    second, _ = poisoned_snapshot(harness, batch, POISON_B)
    assert "paged_kv_indptr.gpu" in filled
    assert first == second, "metadata depends on stale buffer contents"

    split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
    if prefill == "trtllm":
        assert first["trtllm_prefill"] == reference.trtllm_prefill(batch, split)
    if decode == "trtllm":
        assert first["trtllm_decode"] == reference.trtllm_decode(batch, split)
    for wrapper, planned in first["plans"]:
        start, end = (split.num_decodes, batch.num_reqs) if "Prefill" in wrapper else (0, split.num_decodes)
        assert planned == reference.paged_kv(batch, start, end), wrapper
