"""The CUDA-graph support FlashInfer's builder claims (``get_cudagraph_support``) against what its ``build()``
does. UNIFORM_BATCH promises that a batch of 1 + k query tokens per request runs entirely on a decode path that
a CUDA graph replays (TRTLLM's); a builder whose build() sends such a batch to FlashInfer's native prefill
wrapper, which no graph captures, must not claim it (vLLM PR #48167: a non-causal drafter's layers).
"""

from __future__ import annotations

import dataclasses

import pytest

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import spec_decode_batch
from spec_decode_ci.emulation import BLACKWELL, HOPPER
from spec_decode_ci.flashinfer import metadata_view
from spec_decode_ci.flashinfer.builder import BuilderOptions

pytestmark = pytest.mark.build_path


@pytest.mark.parametrize("gpu", [BLACKWELL, HOPPER], ids=["sm100", "sm90"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "non-causal"])
def test_uniform_batch_graphs_claimed_only_where_build_keeps_them_on_trtllm_decode(build_harness, causal, gpu):
    """On Blackwell and on Hopper (XQA decodes), for a causal model and a non-causal (DFlash) drafter: where the
    builder claims UNIFORM_BATCH, a uniform spec-decode batch must come out of build() as TRTLLM decodes only,
    with no prefill; a causal model whose uniform batches do come out so must be claimed UNIFORM_BATCH
    (otherwise spec decode runs without graphs)."""
    if not causal and not compat.flashinfer_attends_non_causally(build_harness(BuilderOptions(), gpu).module):
        pytest.skip(compat.NO_NON_CAUSAL_PATH)
    harness = build_harness(BuilderOptions(non_causal=not causal), gpu)
    claim = harness.cudagraph_support()
    k, page = harness.options.num_spec_tokens, harness.options.page_size
    all_on_graph_decode = True
    for batch in (spec_decode_batch(4, 0, k, page, seed=5), spec_decode_batch(1, 0, k, page, seed=6)):
        batch = dataclasses.replace(batch, causal=causal)
        m = harness.build(batch).metadata
        ran = (f"{m.num_decodes} decodes on {type(m.decode).__name__}, {m.num_prefills} prefills on "
               f"{type(m.prefill).__name__}")
        on_graph_decode = m.num_prefills == 0 and metadata_view.decode_on_trtllm(m)
        all_on_graph_decode &= on_graph_decode
        assert claim != "UNIFORM_BATCH" or on_graph_decode, (
            f"the builder claims UNIFORM_BATCH CUDA graphs, but build() ran a uniform batch of {1 + k} query tokens "
            f"per request as {ran}", batch.describe())
    if causal and all_on_graph_decode:
        assert claim == "UNIFORM_BATCH", (
            f"build() keeps uniform spec-decode batches on TRTLLM decode, yet the builder claims only {claim}: "
            f"speculative decoding on {gpu.name} loses its CUDA graphs")
