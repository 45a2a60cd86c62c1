"""The CUDA-graph mode an engine really runs, read from the engine: the mode vLLM resolved for it, the runtime mode
of every batch its CUDA-graph dispatchers dispatched while it generated (model runner V1's ``CudagraphDispatcher``,
V2's ``CudaGraphManager``), and what vLLM logged about the mode. The least mode a target's uniform
speculative-decoding batches must get is the hardware matrix's (``Device.spec_decode_cuda_graphs``)."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator
from unittest import mock

from spec_decode_ci.e2e.vllm_log import vllm_log_lines
from spec_decode_ci.generator.model import CUDA_GRAPH_MODES


@dataclass(frozen=True)
class Dispatch:
    owner: int  # id() of the dispatcher (V1) or CUDA-graph manager (V2) that dispatched the batch
    num_tokens: int
    query_len: int | None  # the query tokens of each request where the batch is uniform, else None
    mode: str  # the runtime mode dispatched: CUDA_GRAPH_MODES


@dataclass
class GraphLog:
    dispatches: list[Dispatch] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)  # what vLLM logged about its CUDA-graph mode at the start
    resolved: str | None = None  # compilation_config.cudagraph_mode after the engine started
    compile_mode: str | None = None  # compilation_config.mode (torch.compile)
    target_owner: int | None = None  # id() of the target's dispatcher / manager
    max_capture_size: int | None = None  # the largest batch (tokens) a graph was captured for

    def target_spec_batches(self, query_len: int) -> Counter:
        """Runtime mode -> the target's uniform batches of ``query_len`` (1 + k) query tokens a request, within the
        largest captured size."""
        return Counter(d.mode for d in self.dispatches
                       if d.owner == self.target_owner and d.query_len == query_len
                       and (self.max_capture_size is None or d.num_tokens <= self.max_capture_size))

    def figure(self, query_len: int) -> dict[str, Any]:
        """Per role and batch shape, the runtime modes dispatched; the resolved mode; what vLLM logged."""
        shapes: dict[str, Counter] = {}
        for d in self.dispatches:
            role = "target" if d.owner == self.target_owner else "drafter"
            shape = ("spec_decode" if d.query_len == query_len else f"uniform_{d.query_len}") \
                if d.query_len else "mixed"
            shapes.setdefault(f"{role}.{shape}", Counter())[d.mode] += 1
        return {"resolved": self.resolved, "compile_mode": self.compile_mode,
                "max_capture_size": self.max_capture_size,
                "dispatched": {k: dict(sorted(v.items())) for k, v in sorted(shapes.items())},
                "vllm_said": self.logged}


def mode_name(mode: Any) -> str:
    return getattr(mode, "name", str(mode))


def at_least(mode: str, floor: str) -> bool:
    return CUDA_GRAPH_MODES.index(mode) >= CUDA_GRAPH_MODES.index(floor)


@contextmanager
def observed_dispatches(log: GraphLog) -> Iterator[None]:
    """Inside: every CUDA-graph dispatch of the model runners this vLLM has, recorded in ``log``."""
    with ExitStack() as stack:
        try:
            from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
        except ImportError:
            CudagraphDispatcher = None
        if CudagraphDispatcher is not None:
            v1 = CudagraphDispatcher.dispatch

            def dispatch_v1(self, num_tokens, uniform_decode=False, *args, **kwargs):
                mode, descriptor = v1(self, num_tokens, uniform_decode, *args, **kwargs)
                query_len = getattr(self, "uniform_decode_query_len", None) if uniform_decode else None
                log.dispatches.append(Dispatch(id(self), num_tokens, query_len, mode_name(mode)))
                return mode, descriptor

            stack.enter_context(mock.patch.object(CudagraphDispatcher, "dispatch", dispatch_v1))
        try:
            from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
        except ImportError:
            CudaGraphManager = None
        if CudaGraphManager is not None and hasattr(CudaGraphManager, "dispatch"):
            v2 = CudaGraphManager.dispatch

            def dispatch_v2(self, num_reqs, num_tokens, uniform_token_count, *args, **kwargs):
                descriptor = v2(self, num_reqs, num_tokens, uniform_token_count, *args, **kwargs)
                log.dispatches.append(Dispatch(id(self), num_tokens, uniform_token_count,
                                               mode_name(descriptor.cg_mode)))
                return descriptor

            stack.enter_context(mock.patch.object(CudaGraphManager, "dispatch", dispatch_v2))
        yield


def logged_mode():
    """vLLM's log lines about its CUDA-graph mode while inside (a downgrade names the backend and its support); not
    the engine's dump of its whole config, which names every setting."""
    return vllm_log_lines(lambda message: ("cudagraph_mode" in message or "CUDAGraphMode" in message)
                          and "with config:" not in message)


def engine_graphs_of(worker) -> dict[str, Any]:
    """On a worker: the resolved CUDA-graph and compile modes, the largest capture size, and the id() of the
    target's dispatcher (V1) or CUDA-graph manager (V2)."""
    config = worker.vllm_config.compilation_config
    runner = worker.model_runner
    owner = getattr(runner, "cudagraph_dispatcher", None) or getattr(runner, "cudagraph_manager", None)
    return {"resolved": mode_name(config.cudagraph_mode), "compile_mode": mode_name(config.mode),
            "max_capture_size": config.max_cudagraph_capture_size, "target_owner": id(owner) if owner else None}


def shortfall(log: GraphLog, query_len: int, floor: str) -> str | None:
    """Why the target's uniform spec-decode batches ran below ``floor``, or None."""
    got = log.target_spec_batches(query_len)
    said = "; vLLM logged: " + " | ".join(log.logged) if log.logged else "; vLLM logged nothing about it"
    if not got:
        return (f"no uniform speculative-decoding batch ({query_len} query tokens a request) of the target was "
                f"dispatched within the capture size {log.max_capture_size} (resolved mode {log.resolved}){said}")
    below = {mode: n for mode, n in got.items() if not at_least(mode, floor)}
    if not below:
        return None
    return (f"expected the target's uniform speculative-decoding batches ({query_len} query tokens a request) in "
            f"CUDA-graph mode {floor} or better (the matrix's spec_decode_cuda_graphs for this device); came "
            f"{dict(got)} with the engine's mode resolved to {log.resolved}{said}. Look: the attention backend's "
            f"get_cudagraph_support and vLLM's compilation config")
