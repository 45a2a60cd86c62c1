"""spec_decode_ci.e2e.cuda_graphs: a target's uniform spec-decode batches below the matrix's mode are named with
what vLLM logged; the dispatch observer reads vLLM's own CUDA-graph dispatcher; the matrix says FULL on B200 and
PIECEWISE on Hopper for FlashInfer."""

from __future__ import annotations

import pytest

from spec_decode_ci.capabilities import PACKAGED_MATRIX
from spec_decode_ci.e2e.cuda_graphs import Dispatch, GraphLog, at_least, observed_dispatches, shortfall
from spec_decode_ci.generator.model import load_matrix

TARGET, DRAFTER = 1, 2
SAID = ("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend "
        "(support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE")


def log_of(*dispatches: Dispatch, resolved: str = "FULL_AND_PIECEWISE") -> GraphLog:
    return GraphLog(list(dispatches), [SAID], resolved, "VLLM_COMPILE", TARGET, 512)


def test_modes_are_ordered():
    assert at_least("FULL", "PIECEWISE") and at_least("PIECEWISE", "PIECEWISE") and not at_least("NONE", "PIECEWISE")


def test_piecewise_spec_batches_fail_a_full_floor_quoting_vllm():
    log = log_of(Dispatch(TARGET, 16, 4, "PIECEWISE"), Dispatch(TARGET, 16, 4, "PIECEWISE"),
                 Dispatch(TARGET, 40, None, "PIECEWISE"), Dispatch(DRAFTER, 4, 1, "FULL"), resolved="PIECEWISE")
    problem = shortfall(log, 4, "FULL")
    assert problem and "CUDA-graph mode FULL" in problem and "{'PIECEWISE': 2}" in problem and SAID in problem
    assert shortfall(log, 4, "PIECEWISE") is None


def test_only_the_targets_uniform_spec_batches_within_the_capture_size_count():
    log = log_of(Dispatch(TARGET, 16, 4, "FULL"), Dispatch(TARGET, 1024, 4, "NONE"), Dispatch(DRAFTER, 16, 4, "NONE"),
                 Dispatch(TARGET, 40, None, "NONE"))
    assert shortfall(log, 4, "FULL") is None
    assert log.figure(4)["dispatched"] == {"drafter.spec_decode": {"NONE": 1}, "target.mixed": {"NONE": 1},
                                           "target.spec_decode": {"FULL": 1, "NONE": 1}}


def test_no_spec_batch_dispatched_is_a_shortfall():
    assert "no uniform speculative-decoding batch" in shortfall(log_of(Dispatch(TARGET, 40, None, "FULL")), 4, "NONE")


def test_the_matrix_asks_full_on_blackwell_and_piecewise_on_hopper():
    devices = load_matrix(PACKAGED_MATRIX).devices
    assert dict(devices["b200"].spec_decode_cuda_graphs) == {"FLASHINFER": "FULL"}
    for hopper in ("h200", "h100", "h200_35gb", "h200_18gb"):
        assert dict(devices[hopper].spec_decode_cuda_graphs) == {"FLASHINFER": "PIECEWISE"}


@pytest.mark.e2e_offline
def test_the_observer_reads_vllms_v1_dispatcher():
    """vLLM's own CudagraphDispatcher, keyed as for k = 3 with FULL_AND_PIECEWISE, dispatches a uniform batch of
    4-token requests; the observer records it with its query length and the mode vLLM returned."""
    from vllm.config import CompilationConfig, CUDAGraphMode, VllmConfig

    CudagraphDispatcher = pytest.importorskip(
        "vllm.v1.cudagraph_dispatcher", reason="this vLLM has no model runner V1 dispatcher (V2 only)").CudagraphDispatcher

    from spec_decode_ci.emulation import emulated_platform

    log = GraphLog()
    with emulated_platform(), observed_dispatches(log):  # a GPU platform, where vLLM's config asks for one
        config = VllmConfig(compilation_config=CompilationConfig())
        # set after the config resolved: without a model, a platform with graphs drops the sizes it was given
        config.compilation_config.cudagraph_capture_sizes = [4, 8, 16]
        config.compilation_config.max_cudagraph_capture_size = 16
        dispatcher = CudagraphDispatcher(config)
        dispatcher.uniform_decode_query_len = 4  # what 1 + k gives it with a speculative config of k = 3
        dispatcher.initialize_cudagraph_keys(CUDAGraphMode.FULL_AND_PIECEWISE, 4)
        mode, _ = dispatcher.dispatch(num_tokens=8, uniform_decode=True)
        dispatcher.dispatch(num_tokens=6, uniform_decode=False)
    assert [(d.owner, d.num_tokens, d.query_len, d.mode) for d in log.dispatches] == [
        (id(dispatcher), 8, 4, mode.name), (id(dispatcher), 6, None, log.dispatches[1].mode)]
    assert mode.name == "FULL"


def test_the_mode_log_keeps_vllms_reason_not_its_config_dump():
    """vLLM's downgrade line is kept; the engine's config dump (it names cudagraph_mode too) is not (seen on an
    H100, vLLM 0.26.0: a 3,900-character line in every case's figure)."""
    import logging

    from spec_decode_ci.e2e.cuda_graphs import logged_mode

    vllm_logger = logging.getLogger("vllm")
    level = vllm_logger.level
    vllm_logger.setLevel(logging.INFO)  # as vLLM configures its loggers (VLLM_LOGGING_LEVEL's default)
    try:
        with logged_mode() as kept:
            logging.getLogger("vllm.config").warning(SAID)
            logging.getLogger("vllm.v1.engine.core").info(
                "Initializing a V1 LLM engine (v0.26.0) with config: model='m', compilation_config={'cudagraph_mode': 1}")
    finally:
        vllm_logger.setLevel(level)
    assert kept == [SAID], f"expected only vLLM's reason for the mode; came {kept}"
