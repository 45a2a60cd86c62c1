"""Paths of FlashInfer's build() the other modules do not reach, each found by a mutant that survived them
(``spec_decode_ci.mutation``):

- without speculative tokens the runner's host upper bound of ``seq_lens`` is exact, so build() waits on the GPU
  on no path, the native ones included (with speculation they copy ``seq_lens`` once: ``test_guard_truth_table``);
- pages of 128 tokens or more go to TRTLLM's prefill whatever the configuration would pick (FlashInfer's native
  prefill does not take them): every phase on TRTLLM, no host sync, each field equal to the reference, also where
  the configuration alone picks the native prefill (an FP8 KV cache read by a bf16 query);
- a model whose layers differ in window or soft cap is refused on native paths, which take one value for all.
"""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import make_batch, spec_decode_batch
from spec_decode_ci.emulation import BLACKWELL, HOPPER
from spec_decode_ci.flashinfer.builder import BuilderOptions

from .test_native_plan import NATIVE
from .test_reference_equality import assert_trtllm_fields_equal_reference, batches

pytestmark = pytest.mark.build_path

GPUS = [pytest.param(BLACKWELL, id="trtllm"),
        pytest.param(NATIVE, id="native"),
        pytest.param(BLACKWELL.variant(trtllm_prefill=False), id="native-prefill")]


def no_speculation_batches(page: int):
    """Single-token decodes then prefills, at and around page boundaries; a prefill-only and a decode-only one."""
    yield "mixed", spec_decode_batch(4, 3, 0, page, seed=page, decode_query_len=1)
    yield "page-boundaries", make_batch([1, 1, 5, 2 * page], [page, page + 1, 2 * page, 2 * page], page, seed=5)
    yield "prefill-only", spec_decode_batch(0, 3, 0, page, seed=page + 1)
    yield "decode-only", spec_decode_batch(5, 0, 0, page, seed=page + 2, decode_query_len=1)


def syncs_text(result) -> str:
    return "\n".join(map(str, result.syncs)) or "none"


@pytest.mark.parametrize("gpu", GPUS)
def test_without_speculation_build_never_waits_on_the_gpu(build_harness, gpu):
    """No speculative tokens, the runner's host bound exact: zero host syncs on every path, native included."""
    harness = build_harness(BuilderOptions(num_spec_tokens=0), gpu)
    for name, batch in no_speculation_batches(harness.options.page_size):
        result = harness.build(batch, watch_syncs=True)
        assert result.syncs == [], (
            f"{name} ({batch.describe()}) on {gpu.name}: expected no host sync (without speculation the runner's "
            f"host upper bound of seq_lens is exact and vLLM plans from it); came:\n{syncs_text(result)}\nLook: "
            f"the seq_lens_cpu choice in FlashInferMetadataBuilder.build()")


PAGE_128 = [pytest.param(BuilderOptions(page_size=128), id="bf16"),
            pytest.param(BuilderOptions(page_size=128, kv_cache_dtype="fp8", quantize_query=False), id="fp8-cache")]


@pytest.mark.parametrize("options", PAGE_128)
def test_pages_of_128_run_every_phase_on_trtllm(build_harness, options):
    """Pages of 128 tokens: both phases on TRTLLM, no host sync, every TRTLLM field equal to the reference."""
    harness = build_harness(options)
    page = options.page_size
    for name, batch in batches(page, harness.options.num_spec_tokens):
        result = harness.build(batch, watch_syncs=True)
        m = result.metadata
        kernels = {type(m.prefill).__name__, type(m.decode).__name__} - {"NoneType"}
        assert kernels <= {compat.TRTLLM_PREFILL_CLASS, harness.trtllm_decode_class}, (
            f"{name} ({batch.describe()}): expected both phases on TRTLLM with pages of {page} tokens (vLLM forces "
            f"TRTLLM prefill from 128 up); came {sorted(kernels)}. Look: prefill_force_trtllm in build()")
        assert result.syncs == [], f"{name}: expected no host sync on an all-TRTLLM batch; came:\n{syncs_text(result)}"
        assert_trtllm_fields_equal_reference(harness, result, batch, name)


def test_pages_of_128_force_trtllm_prefill_where_the_configuration_would_not(build_harness):
    """The FP8-cache, bf16-query configuration picks the native prefill at 16-token pages (so the 128-token case
    above shows the forcing, not the configuration's own choice)."""
    harness = build_harness(dataclasses.replace(PAGE_128[1].values[0], page_size=16))
    batch = spec_decode_batch(2, 2, harness.options.num_spec_tokens, 16, seed=1)
    prefill = type(harness.build(batch).metadata.prefill).__name__
    assert prefill == "FIPrefill", f"expected the native prefill for an FP8 cache and a bf16 query at 16-token " \
                                   f"pages; came {prefill}"


LAYERS_DIFFER = [pytest.param((127, None), "Window left is not the same", id="window"),
                 pytest.param((-1, 30.0), "share the same values", id="soft-cap")]


@pytest.mark.parametrize("other_layer,refusal", LAYERS_DIFFER)
def test_layers_that_differ_are_refused_on_native_paths_only(build_harness, other_layer, refusal):
    """A model whose layers differ in window or soft cap: FlashInfer's native kernels take one value for all, so
    vLLM refuses a batch with a native phase; an all-TRTLLM batch (TRTLLM reads each layer's own) builds."""
    options = BuilderOptions(other_layer=other_layer)
    batch = spec_decode_batch(2, 2, options.num_spec_tokens, options.page_size, seed=9)
    try:
        trtllm = build_harness(options)
    except (ValueError, AssertionError) as exc:
        pytest.skip(f"this vLLM refuses layers that differ when the builder is made, before any batch: {exc}")
    metadata = trtllm.build(batch).metadata
    assert metadata.num_prefills == 2, f"expected the all-TRTLLM batch built; came {metadata}"
    with pytest.raises((ValueError, AssertionError), match=refusal):
        build_harness(options, NATIVE).build(batch)


def test_native_decode_replays_a_cuda_graph_wrapper_for_pure_decode_batches_only(build_harness):
    """With CUDA graphs on (vLLM's default), a native decode-only batch of up to vLLM's largest graph batch
    ((1 + k) x max_num_seqs tokens, capped by the largest capture size) plans a CUDA-graph decode wrapper, whose
    persistent buffers a replay reads; a decode beside prefills plans the eager one."""
    options = BuilderOptions(num_spec_tokens=0, max_num_seqs=16)
    harness = build_harness(options, NATIVE)
    compilation = harness.vllm_config.compilation_config
    if not compilation.cudagraph_mode.has_full_cudagraphs():
        pytest.skip(f"vLLM resolved cudagraph_mode {compilation.cudagraph_mode.name}: no full graphs to replay")
    largest = min(options.max_num_seqs, compilation.max_cudagraph_capture_size or options.max_num_seqs)
    page = options.page_size
    shapes = {"pure-decode": (spec_decode_batch(3, 0, 0, page, seed=1, decode_query_len=1), True),
              "pure-decode-largest": (spec_decode_batch(largest, 0, 0, page, seed=2, decode_query_len=1), True),
              "mixed": (spec_decode_batch(3, 2, 0, page, seed=3, decode_query_len=1), False)}
    for name, (batch, graph) in shapes.items():
        decode = [c for c in harness.build(batch).plans if c.wrapper == "BatchDecodeWithPagedKVCacheWrapper"]
        assert [c.cuda_graph for c in decode] == [graph], (
            f"{name} ({batch.describe()}): expected one decode wrapper {'for' if graph else 'not for'} CUDA-graph "
            f"replay; came {[c.cuda_graph for c in decode]}. Look: use_cudagraph in build()'s native decode branch")


@pytest.mark.parametrize("gpu", [pytest.param(HOPPER.variant(trtllm_prefill=False, trtllm_decode=False), id="sm90"),
                                 pytest.param(NATIVE, id="sm100")])
def test_native_decode_plans_one_query_per_decode_token(build_harness, gpu):
    """Without speculation each decode has one query token: the native decode wrapper is planned for as many query
    rows as the batch has decode tokens (requests planned x queries per request)."""
    harness = build_harness(BuilderOptions(num_spec_tokens=0), gpu)
    for name, batch in no_speculation_batches(harness.options.page_size):
        decodes = [c for c in harness.build(batch).plans if c.wrapper == "BatchDecodeWithPagedKVCacheWrapper"]
        tokens = sum(q for q in batch.query_lens if q == 1)
        assert len(decodes) == (1 if tokens else 0), (
            f"{name} ({batch.describe()}) on {gpu.name}: expected {1 if tokens else 0} native decode plan; came "
            f"{len(decodes)}. Look: which decode kernel build() picked")
        for call in decodes:
            rows = (len(call.kwargs["indptr"]) - 1) * int(call.kwargs.get("q_len_per_req") or 1)
            assert rows == tokens, (
                f"{name} ({batch.describe()}) on {gpu.name}: expected the decode wrapper planned for {tokens} query "
                f"rows, one per decode token; came {rows} (requests x q_len_per_req). Look: num_input_tokens and "
                f"q_len_per_req in build()'s native decode branch")


def test_non_causal_batches_on_blackwell_are_all_prefill(build_harness):
    """A non-causal batch (a DFlash drafter's) is not split into decodes where no XQA kernel routes it: every
    request and token counts as prefill, none as decode."""
    harness = build_harness(BuilderOptions(non_causal=True))
    if not compat.flashinfer_attends_non_causally(harness.module):
        pytest.skip(compat.NO_NON_CAUSAL_PATH)
    if getattr(harness.builder, "use_xqa", False):
        pytest.skip("this builder routes non-causal decodes to XQA")
    batch = dataclasses.replace(spec_decode_batch(3, 2, harness.options.num_spec_tokens, harness.page_size, seed=6),
                                causal=False)
    m = harness.build(batch).metadata
    counts = (m.num_decodes, m.num_decode_tokens, m.num_prefills, m.num_prefill_tokens)
    assert counts == (0, 0, batch.num_reqs, batch.num_tokens), (
        f"expected (decodes, decode tokens, prefills, prefill tokens) (0, 0, {batch.num_reqs}, {batch.num_tokens}) "
        f"for a non-causal batch; came {counts}. Look: build()'s non-causal branch (route_decode)")
