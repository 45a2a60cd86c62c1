"""Runs vLLM's real ``FlashInferMetadataBuilder.build()`` on a batch and reads back what it produced.

Two more hardware-boundary fakes live here, each only where it must:
- on a CPU, the Triton launch ``_copy_page_indices_kernel`` is replaced by a host reference (Triton cannot
  run on a CPU); with CUDA the real kernel runs;
- the FlashInfer wrappers' ``plan()`` (and FlashInfer's ``fast_decode_plan``, which re-plans a CUDA-graph
  wrapper) records its arguments instead of planning GPU work.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from unittest import mock

import torch

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import Batch, padded_to_cuda_graph
from spec_decode_ci.buildpath.harness import BuildHarnessBase
from spec_decode_ci.buildpath.run import PlanCall, builder_device
from spec_decode_ci.buildpath.split import dcp_local_len
from spec_decode_ci.emulation import BLACKWELL, EmulatedGpu, is_page_locked
from spec_decode_ci.flashinfer.builder import BuilderOptions, builder_context, make_builder, make_vllm_config
from spec_decode_ci.sync import outside_sentinels


class CopyPageIndicesOnHost:
    """Host stand-in for the Triton kernel ``_copy_page_indices_kernel[(num_reqs,)](out, table, stride, indptr)``:
    request ``i``'s first ``indptr[i+1] - indptr[i]`` pages of the block table go to ``out[indptr[i]:]``."""

    def __getitem__(self, grid):
        def launch(out, block_table, stride, indptr, **meta):
            with outside_sentinels(), torch.no_grad():
                bounds = indptr.tolist()
                for i in range(grid[0]):
                    n = bounds[i + 1] - bounds[i]
                    out[bounds[i]:bounds[i + 1]] = block_table.reshape(-1)[i * stride:i * stride + n]
        return launch


# plan() arguments FlashInfer copies from the host to its device buffers with non_blocking=True (native and DCP
# prefill, decode): pageable memory there makes the "asynchronous" copy block the host.
PLAN_HOST_INPUTS = frozenset({
    "qo_indptr", "paged_kv_indptr", "paged_kv_last_page_len", "seq_lens", "indptr", "last_page_len",
    "qo_indptr_cpu", "paged_kv_indptr_cpu", "paged_kv_last_page_len_cpu", "kv_lens_cpu",
})


def recording_wrapper(real_cls: type, calls: list[PlanCall]) -> type:
    """A stand-in for a FlashInfer wrapper class whose ``plan()`` appends its arguments to ``calls``.

    One class per builder: the builder caches wrapper instances and checks their type on later builds."""

    class RecordingWrapper(real_cls):
        # Hardware boundary: the real wrapper pins host memory and plans GPU work; we keep what the builder asks.
        def __init__(self, workspace_buffer=None, kv_layout="NHD", *args, **kwargs):
            self.kv_layout = kv_layout
            self._use_cuda_graph = bool(kwargs.get("use_cuda_graph", False))

        def plan(self, *args, **kwargs):
            with outside_sentinels():
                locked = {k: is_page_locked(v) for k, v in kwargs.items()
                          if k in PLAN_HOST_INPUTS and isinstance(v, torch.Tensor)}
                copied = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
            calls.append(PlanCall(real_cls.__name__, {"args": args, **copied}, locked, self._use_cuda_graph))

    RecordingWrapper.__name__ = RecordingWrapper.__qualname__ = real_cls.__name__
    return RecordingWrapper


@dataclass
class BuildHarness(BuildHarnessBase):
    options: BuilderOptions = field(default_factory=BuilderOptions)
    gpu: EmulatedGpu = BLACKWELL
    module: Any = None  # vLLM's flashinfer backend module, or a patched copy of it (self-check)

    def __post_init__(self) -> None:
        if self.module is None:
            import vllm.v1.attention.backends.flashinfer as module

            self.module = module
        self._plans: list[PlanCall] = []
        self._recording_wrappers = {n: recording_wrapper(getattr(self.module, n), self._plans) for n in
                                    ("BatchPrefillWithPagedKVCacheWrapper", "BatchDecodeWithPagedKVCacheWrapper",
                                     "BatchPrefillWithRaggedKVCacheWrapper") if hasattr(self.module, n)}
        self.vllm_config = make_vllm_config(self.options)
        self.device = builder_device()
        self.builder = self.fresh_builder()

    def fresh_builder(self):
        """A new real builder of the same options (one that has built nothing yet)."""
        with self._kernel_fakes():
            return make_builder(self.options, self.gpu, module=self.module, device=self.device)

    @property
    def page_size(self) -> int:
        return self.options.page_size

    def local_seq_lens(self, batch: Batch) -> list[int] | None:
        o = self.options
        if o.dcp_world_size == 1:
            return None
        return [dcp_local_len(s, o.dcp_world_size, o.dcp_rank, self.builder.dcp_kv_cache_interleave_size)
                for s in batch.seq_lens]

    @property
    def trtllm_decode_class(self) -> str:
        return compat.trtllm_decode_metadata_class(self.module)

    @cached_property
    def cudagraph_padding(self) -> compat.CudaGraphPadding:
        """The padding rules of the GPU model runner this vLLM runs the harness's config with."""
        with builder_context(self.vllm_config, self.gpu, self.module):
            return compat.cudagraph_padding(compat.model_runner(self.vllm_config))

    def cudagraph_support(self) -> str:
        """The CUDA-graph support vLLM's builder class claims for this config and KV cache (an
        ``AttentionCGSupport`` name), asked on the emulated GPU as the GPU model runner asks it."""
        with builder_context(self.vllm_config, self.gpu, self.module):
            return type(self.builder).get_cudagraph_support(self.vllm_config, self.builder.kv_cache_spec).name

    def padded(self, batch: Batch, num_tokens_padded: int, runner: str | None = None) -> Batch:
        """``batch`` replayed on a CUDA graph of ``num_tokens_padded`` tokens, padded as ``runner`` pads it (None:
        the runner this vLLM runs the harness's config with)."""
        padding = self.cudagraph_padding if runner is None else compat.cudagraph_padding(runner)
        return padded_to_cuda_graph(batch, num_tokens_padded, self.decode_threshold, self.options.max_num_seqs,
                                    padding)

    @property
    def require_uniform_decodes(self) -> bool:
        return not compat.decodes_may_be_ragged(self.builder)

    def _kernel_fakes(self) -> ExitStack:
        stack = ExitStack()
        m = self.module
        if self.device.type == "cpu":
            compat.require(m, "_copy_page_indices_kernel", what="the Triton page-index copy build() launches")
            # Hardware boundary: Triton kernels cannot launch on a CPU; a host reference does the copy.
            stack.enter_context(mock.patch.object(m, "_copy_page_indices_kernel", CopyPageIndicesOnHost()))
        for name, cls in self._recording_wrappers.items():
            stack.enter_context(mock.patch.object(m, name, cls))
        if hasattr(m, "fast_decode_plan"):
            # Hardware boundary: FlashInfer's re-plan of a CUDA-graph decode wrapper (every plan after its first)
            # plans GPU work as plan() does; its arguments are recorded the same way.
            stack.enter_context(mock.patch.object(m, "fast_decode_plan",
                                                  lambda wrapper, *args, **kwargs: wrapper.plan(*args, **kwargs)))
        return stack

    def build_context(self) -> ExitStack:
        self._plans.clear()
        stack = ExitStack()
        stack.enter_context(builder_context(self.vllm_config, self.gpu, self.module, self.options))
        stack.enter_context(self._kernel_fakes())
        return stack

    def plans(self) -> list[PlanCall]:
        return list(self._plans)


def make_harness(options: BuilderOptions, gpu: EmulatedGpu) -> BuildHarness:
    """The registered factory (``spec_decode_ci.backends``): on the self-check's regressed copy of vLLM's module
    where ``--regression`` asks for one."""
    import importlib

    from spec_decode_ci.backends import BACKENDS
    from spec_decode_ci.buildpath import regressions

    backend = BACKENDS["flashinfer"]
    builder = importlib.import_module(backend.module).FlashInferMetadataBuilder
    copies = regressions.requested(backend, builder)
    return BuildHarness(options, gpu, module=copies[0] if copies else None)
