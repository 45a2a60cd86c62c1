"""``build()`` leaves the shared ``CommonAttentionMetadata`` as it found it (device and host halves), and carries
nothing from one batch to the next: along a random sequence of batches, each batch's metadata and the builder's
settings equal what a fresh builder gives for that batch alone.

vLLM shipped both: prefill-adjusted lengths written into the cached host ``seq_lens`` that other KV-cache groups
reuse, and builder attributes assigned in ``build()`` that later builds read.
"""

from __future__ import annotations

import random

import pytest

from spec_decode_ci import compat
from spec_decode_ci.emulation import BLACKWELL, HOPPER, EmulatedGpu
from spec_decode_ci.flashinfer import metadata_view
from spec_decode_ci.buildpath.batches import Choices, random_spec_decode_batch, spec_decode_batch
from spec_decode_ci.flashinfer.isolation import builder_settings, metadata_changes, metadata_fields

pytestmark = pytest.mark.build_path

PHASES = [("trtllm", "trtllm"), ("native", "trtllm"), ("trtllm", "native"), ("native", "native")]


def emulated(prefill: str, decode: str) -> EmulatedGpu:
    return BLACKWELL.variant(trtllm_prefill=prefill == "trtllm", trtllm_decode=decode == "trtllm")


def batches(harness):
    k, page, q = harness.options.num_spec_tokens, harness.options.page_size, harness.decode_threshold
    yield "mixed", spec_decode_batch(3, 3, k, page, seed=21, decode_query_len=q)
    yield "decode-only", spec_decode_batch(4, 0, k, page, seed=22, decode_query_len=q)
    yield "prefill-only", spec_decode_batch(0, 3, k, page, seed=23)
    yield "padded-decodes", harness.padded(spec_decode_batch(3, 0, k, page, seed=24, decode_query_len=q), 5 * q)
    mixed = spec_decode_batch(2, 2, k, page, seed=25, decode_query_len=q)
    yield "padded-mixed", harness.padded(mixed, mixed.num_tokens + 3)


@pytest.mark.parametrize("prefill,decode", PHASES, ids=[f"prefill={p}-decode={d}" for p, d in PHASES])
def test_build_leaves_its_inputs_untouched(build_harness, prefill, decode):
    harness = build_harness(gpu=emulated(prefill, decode))
    for name, batch in batches(harness):
        before = metadata_fields(harness.device_batch(batch).common)
        result = harness.build(batch)
        changes = metadata_changes(before, result.device_batch.common, harness.device_batch(batch).common)
        assert not changes, f"{name} ({batch.describe()}): build() changed its input:\n" + "\n".join(changes)


def random_sequence(harness, seed: int, length: int):
    choose = Choices(random.Random(seed))
    o = harness.options
    for i in range(length):
        batch = random_spec_decode_batch(choose, o.page_size, o.num_spec_tokens, o.max_model_len, max_reqs=24)
        if i % 3 == 2:  # every third batch as a CUDA-graph replay pads it
            uniform = all(x == harness.decode_threshold for x in batch.query_lens)
            tokens = batch.num_tokens + (harness.decode_threshold * 2 if uniform else 5)
            batch = harness.padded(batch, tokens)
        yield batch


@pytest.mark.parametrize("prefill,decode", PHASES, ids=[f"prefill={p}-decode={d}" for p, d in PHASES])
def test_no_state_carried_between_builds(build_harness, prefill, decode):
    harness = build_harness(gpu=emulated(prefill, decode))
    long_lived = harness.fresh_builder()
    for i, batch in enumerate(random_sequence(harness, seed=PHASES.index((prefill, decode)), length=12)):
        fresh = harness.fresh_builder()
        alone = metadata_view.snapshot(harness.build(batch, builder=fresh), batch)
        in_sequence = metadata_view.snapshot(harness.build(batch, builder=long_lived), batch)
        assert in_sequence == alone, f"batch {i} ({batch.describe()}) depends on the batches before it"
        settings, fresh_settings = builder_settings(long_lived), builder_settings(fresh)
        changed = {k: (settings.get(k), fresh_settings.get(k)) for k in settings.keys() | fresh_settings.keys()
                   if settings.get(k) != fresh_settings.get(k)}
        assert not changed, f"batch {i}: builder settings differ from a fresh builder's (sequence, fresh): {changed}"


def test_an_emulated_gpu_answers_for_itself_only():
    """Blackwell emulated after Hopper in one process still runs a mixed batch on TRTLLM in both phases: what vLLM
    cached from the Hopper emulation (``supports_trtllm_attention`` is ``functools.cache``'d) does not carry over;
    and Hopper after Blackwell runs its prefill natively."""
    from spec_decode_ci.flashinfer.harness import BuildHarness

    def phases(gpu):
        harness = BuildHarness(gpu=gpu)
        k, page = harness.options.num_spec_tokens, harness.options.page_size
        m = harness.build(spec_decode_batch(2, 2, k, page, seed=31)).metadata
        return type(m.prefill).__name__, type(m.decode).__name__

    blackwell_first = phases(BLACKWELL)
    hopper = phases(HOPPER)
    assert phases(BLACKWELL) == blackwell_first and blackwell_first[0] == compat.TRTLLM_PREFILL_CLASS, (
        blackwell_first, hopper)
    assert phases(HOPPER) == hopper and hopper[0] != compat.TRTLLM_PREFILL_CLASS, hopper


def test_an_emulated_gpu_picks_its_own_mla_prefill_backend():
    """The MLA prefill backend vLLM selects (``functools.cache``'d on the model's shape, not the GPU) is asked
    again on each emulated GPU: Hopper after Blackwell does not get a Blackwell-only backend."""
    from vllm.platforms.interface import DeviceCapability

    from spec_decode_ci.emulation import emulated_platform
    from spec_decode_ci.mla.builder import MlaOptions, vllm_config

    try:
        from vllm.v1.attention.backends.mla.prefill import get_mla_prefill_backend
    except ImportError:
        pytest.skip("this vLLM has no MLA prefill backend selection (the builder picks its prefill kernel)")

    def selected(gpu):
        config = vllm_config(MlaOptions(), gpu)
        with emulated_platform(gpu):
            try:
                return get_mla_prefill_backend(config)
            except ValueError:  # none of the GPU's MLA prefill backends can load here
                return None

    blackwell = selected(BLACKWELL)
    assert blackwell is not None and blackwell.supports_compute_capability(DeviceCapability(10, 0)), blackwell
    hopper = selected(HOPPER)
    assert hopper is None or hopper.supports_compute_capability(DeviceCapability(9, 0)), (
        f"on emulated Hopper vLLM selected {hopper.get_name()}, a Blackwell-only backend: Blackwell's answer kept")
    assert selected(BLACKWELL) is blackwell
