"""vLLM's MLA metadata builders, which DeepSeek-style MTP speculation runs on B200, on an emulated SM100: every
dense MLA backend vLLM's platform would try for the model. ``build()`` must not wait on the GPU, every field
the decode and prefill kernels read must equal the reference, poison in the builder's persistent buffers must
never reach them, and random batches must hold all three.

The common builder once copied the device ``seq_lens`` to the host in its prefill path: a host sync per step
with MTP and chunked prefill.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from spec_decode_ci import compat
from spec_decode_ci.buildpath import split as phases
from spec_decode_ci.buildpath.batches import make_batch, spec_decode_batch
from spec_decode_ci.buildpath.run import persistent_buffers, poison
from spec_decode_ci.mla import prefill_kernels, reference
from spec_decode_ci.mla.builder import MlaOptions

from .test_properties import spec_decode_batches

pytestmark = pytest.mark.build_path


def _backends() -> list[tuple[str, str | None]]:
    try:
        from spec_decode_ci.mla.builder import sm100_dense_backends
    except ImportError:  # no vLLM: the tier is not run here
        return []
    return sm100_dense_backends()


BACKENDS = _backends()
TESTABLE = [name for name, why in BACKENDS if why is None]
# a backend that cannot run here skips with its hardware reason; one whose module is gone errors (below)
BACKEND_PARAMS = [pytest.param(name, marks=pytest.mark.skip(reason=f"{name}: {why}") if isinstance(why, str) else ())
                  for name, why in BACKENDS] or [pytest.param("none", marks=pytest.mark.skip(reason="no vLLM"))]


@pytest.fixture(autouse=True)
def _backend_module_exists(request):
    """A backend vLLM lists whose module or class is gone ends its tests in ``compat.MissingVllmField``."""
    callspec = getattr(request.node, "callspec", None)
    why = dict(BACKENDS).get(callspec.params.get("backend")) if callspec else None
    if isinstance(why, Exception):
        raise why

# (decodes, prefills, prefill context) of each batch shape the runner hands build() with MTP
MIXES = {
    "decode-only": (4, 0, None),
    "prefill-only-no-context": (0, 3, "none"),
    "prefill-only-chunked": (0, 3, "some"),
    "mixed": (4, 3, "some"),
    "mixed-long-context": (2, 12, "long"),  # more context than the workspace holds: several chunks
}


def batch_for(harness, mix: str, seed: int = 5):
    decodes, prefills, context = MIXES[mix]
    k, page = harness.options.num_spec_tokens, harness.page_size
    q_decode = min(1 + k, harness.decode_threshold)
    if context == "some":
        return spec_decode_batch(decodes, prefills, k, page, seed=seed, decode_query_len=q_decode)
    query = [q_decode] * decodes + [harness.decode_threshold + 7 + i for i in range(prefills)]
    if context == "none":
        seq = [q_decode + 3 * page + i for i in range(decodes)] + query[decodes:]
    else:
        seq = [q_decode + 2 * page] * decodes + [harness.options.max_model_len - 30 - i for i in range(prefills)]
    return make_batch(query, seq, page, seed=seed)


def check_reference(harness, batch, result) -> None:
    split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
    view = reference.view(result.metadata, batch)
    largest = view.pop("largest_context_chunk", 0)
    assert view == reference.expected(batch, split), batch.describe()
    assert largest <= harness.workspace_rows, f"a context chunk of {largest} rows > workspace {harness.workspace_rows}"
    decode_starts = reference.decode_query_start(result.metadata) if split.num_decodes else None
    if decode_starts is not None:  # a varlen decode kernel reads each request's queries from these offsets
        assert decode_starts == phases.cumulative(batch.query_lens[:split.num_decodes])
    bound = reference.decode_query_bound(result.metadata) if split.num_decodes else None
    if bound is not None:  # ... and takes no more of a request's queries than this bound
        assert bound >= max(batch.query_lens[:split.num_decodes]), (bound, batch.describe())
    if harness.scheduling.calls:  # FlashMLA schedules the decodes' KV from their lengths and queries per KV head
        seq_lens, queries_per_head, kv_heads = harness.scheduling.calls[-1]
        assert seq_lens == list(batch.seq_lens[:split.num_decodes])
        assert (queries_per_head, kv_heads) == (max(batch.query_lens[:split.num_decodes]) * harness.options.num_heads, 1)


def test_vllm_offers_a_testable_dense_mla_backend_on_sm100():
    """vLLM's SM100 priority list for an MLA model has dense backends and at least one whose builder runs here;
    each one that cannot run here is skipped below with its reason."""
    assert BACKENDS, "no dense MLA backend on vLLM's SM100 priority list"
    assert TESTABLE, f"none of {BACKENDS} can be built here"


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_build_does_not_sync(build_harness, backend, mix):
    """No host sync in build() for any phase mix: the prefill path reads the runner's host lengths."""
    harness = build_harness(MlaOptions(backend=backend))
    batch = batch_for(harness, mix)
    result = harness.build(batch, watch_syncs=True)
    if result.cuda_syncs is not None:
        assert len(result.cuda_syncs) == len(result.syncs), (result.cuda_syncs, result.syncs)
    assert result.syncs == [], f"{backend} {batch.describe()} synced:\n" + "\n".join(map(str, result.syncs))


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_fields_equal_reference(build_harness, backend, mix):
    """Decode and prefill split, each request's pages and lengths, prefill query offsets, and the context the
    chunks gather (each prefill's tokens before its queries, once, in order, within the workspace)."""
    harness = build_harness(MlaOptions(backend=backend))
    batch = batch_for(harness, mix)
    check_reference(harness, batch, harness.build(batch))


@pytest.mark.parametrize("mix", [m for m, (_, prefills, _) in MIXES.items() if prefills])
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_prefill_kernel_calls_equal_reference(build_harness, backend, mix):
    """What the prefill backend vLLM selects hands its attention kernel, run on the built metadata as the forward
    pass runs it: the new tokens' causal call (each prefill's query rows and lengths) and one non-causal call per
    context chunk (the chunk's prefills' queries, and the context rows it gathered: lengths and offsets agreeing
    with the gather); the maxima bound the rows."""
    harness = build_harness(MlaOptions(backend=backend))
    batch = batch_for(harness, mix)
    result = harness.build(batch)
    prefill = result.metadata.prefill
    selected = prefill_kernels.backend_of(result.metadata)
    if selected is None:
        pytest.skip("this vLLM's MLA builder hands no prefill backend to the forward pass")
    if selected.get_name() not in prefill_kernels.RECORDERS:
        pytest.skip(f"no recorder of the {selected.get_name()} MLA prefill kernel's arguments")
    split = phases.split(batch, harness.decode_threshold, harness.require_uniform_decodes)
    chunks = compat.mla_context_chunks(prefill.chunked_context) if prefill.chunked_context is not None else []
    new_tokens, chunk_calls = prefill_kernels.calls(result.metadata, harness.options.num_heads, harness.options.dims)
    made = [new_tokens, *chunk_calls]
    assert [c.rows() for c in made] == reference.prefill_kernel_rows(batch, split, chunks), batch.describe()
    for call in made:
        assert call.max_q_len >= max(call.cum_seq_lens_q[i + 1] - call.cum_seq_lens_q[i]
                                     for i in range(call.batch_size)), (call, batch.describe())
        assert call.max_kv_len >= max(call.seq_lens), (call, batch.describe())


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_poison_does_not_reach_the_kernels(build_harness, backend):
    """Garbage in every persistent buffer of a builder that has already built must not change what the next
    builds hand the kernels, whatever the phase mix."""
    harness = build_harness(MlaOptions(backend=backend))
    builder = harness.fresh_builder()
    harness.build(batch_for(harness, "mixed", seed=1), builder=builder)  # buffers made on first use exist now
    assert any(True for _ in persistent_buffers(builder)), "the walk found no persistent buffer"
    for mix in MIXES:
        batch = batch_for(harness, mix, seed=2)
        views = []
        for pattern in (0x5A5A5A5A, -77):
            poison(builder, pattern)
            result = harness.build(batch, builder=builder)
            views.append(reference.view(result.metadata, batch))
            check_reference(harness, batch, result)
        assert views[0] == views[1], f"{mix}: metadata depends on stale buffer contents"


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_random_batches(build_harness, backend):
    """Random spec-decode batches (ragged and uniform decodes, prefills with and without context, page
    boundaries): no host sync, reference equality, poison invariance. Derandomized."""
    harness = build_harness(MlaOptions(backend=backend))

    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(batch=spec_decode_batches(harness.page_size, harness.options.num_spec_tokens))
    def run(batch):
        poison(harness.builder, 0x5A5A5A5A)
        first = harness.build(batch, watch_syncs=True)
        assert first.syncs == [], "\n".join(map(str, first.syncs))
        check_reference(harness, batch, first)
        poison(harness.builder, -77)
        second = harness.build(batch)
        assert reference.view(first.metadata, batch) == reference.view(second.metadata, batch), \
            "metadata depends on stale buffer contents"

    run()
