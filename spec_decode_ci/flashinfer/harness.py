"""Runs vLLM's real ``FlashInferMetadataBuilder.build()`` on a batch and reads back what it produced.

Two more hardware-boundary fakes live here, each only where it must:
- on a CPU, the Triton launch ``_copy_page_indices_kernel`` is replaced by a host reference (Triton cannot
  run on a CPU); with CUDA the real kernel runs;
- the FlashInfer wrappers' ``plan()`` records its arguments instead of planning GPU work.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator
from unittest import mock

import torch

from spec_decode_ci import compat
from spec_decode_ci.flashinfer.reference import dcp_local_len
from spec_decode_ci.flashinfer.batches import Batch, DeviceBatch, cdiv, common_attn_metadata, padded_to_cuda_graph
from spec_decode_ci.flashinfer.builder import (
    BuilderOptions, builder_context, builder_device, make_builder, make_vllm_config,
)
from spec_decode_ci.emulation import BLACKWELL, EmulatedGpu, is_page_locked
from spec_decode_ci.sync import HostSyncSentinel, cuda_sync_warnings, outside_sentinels


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


@dataclass
class PlanCall:
    wrapper: str
    kwargs: dict[str, Any]
    host_inputs_page_locked: dict[str, bool] = field(default_factory=dict)


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
            calls.append(PlanCall(real_cls.__name__, {"args": args, **copied}, locked))

    RecordingWrapper.__name__ = RecordingWrapper.__qualname__ = real_cls.__name__
    return RecordingWrapper


def _host_by_name(path: str) -> bool:
    """On a CPU every tensor is on the host; vLLM names its host-side buffers ``*_cpu*`` / ``.cpu``."""
    return "cpu" in re.split(r"[._\[\]']+", path)


def persistent_buffers(builder) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """Every tensor the builder keeps between batches, found by walking its attributes (not by name):
    yields (path, tensor, lives_on_device). A ``CpuGpuBuffer``-like object gives a host and a device half;
    a plain tensor is on the device if it is on a GPU or, on a CPU, unless its name says ``cpu``."""
    seen: set[int] = set()

    def walk(path: str, value: Any):
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            on_device = value.device.type != "cpu" if torch.cuda.is_available() else not _host_by_name(path)
            yield path, value, on_device
        elif isinstance(getattr(value, "cpu", None), torch.Tensor) and isinstance(getattr(value, "gpu", None),
                                                                                  torch.Tensor):
            yield f"{path}.cpu", value.cpu, False
            yield f"{path}.gpu", value.gpu, True
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from walk(f"{path}[{k!r}]", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                yield from walk(f"{path}[{i}]", v)

    for name, value in vars(builder).items():
        yield from walk(name, value)


def poison(builder, pattern: int) -> list[str]:
    """Fill every persistent buffer with garbage; returns the paths filled.

    One cell is restored: index 0 of a host-side ``*indptr`` buffer. vLLM writes host prefix sums from
    index 1 on and relies on index 0 keeping its construction-time 0 ("0-index is always 0" in
    flashinfer.py); no batch can change it, so garbage there would test nothing that can happen. The
    device halves are poisoned whole: the builder must write their index 0 itself (the PR's fix zeroes it).
    """
    filled = []
    for path, tensor, on_device in persistent_buffers(builder):
        if not tensor.numel():
            continue
        tensor.fill_(pattern & 0xFF if tensor.dtype == torch.uint8 else pattern)
        if not on_device and path.rsplit(".", 1)[0].endswith("indptr"):
            tensor[0] = 0
        filled.append(path)
    return filled


@dataclass
class BuildResult:
    metadata: Any
    device_batch: DeviceBatch
    plans: list[PlanCall]
    sentinel: HostSyncSentinel | None
    cuda_syncs: list[str] | None = None  # what CUDA's sync debug mode saw (GPU runs with a sentinel only)

    @property
    def syncs(self):
        return self.sentinel.events if self.sentinel else []


@dataclass
class BuildHarness:
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

    def device_batch(self, batch: Batch) -> DeviceBatch:
        """The ``CommonAttentionMetadata`` ``build()`` is given for ``batch`` (a new one each call)."""
        if batch.page_size != self.options.page_size:
            raise ValueError(f"batch page size {batch.page_size} != builder page size {self.options.page_size}")
        o = self.options
        local = [dcp_local_len(s, o.dcp_world_size, o.dcp_rank, self.builder.dcp_kv_cache_interleave_size)
                 for s in batch.seq_lens] if o.dcp_world_size > 1 else None
        return common_attn_metadata(batch, self.device, cdiv(o.max_model_len, o.page_size), local)

    @property
    def trtllm_decode_class(self) -> str:
        return compat.trtllm_decode_metadata_class(self.module)

    @property
    def decode_threshold(self) -> int:
        return self.builder.reorder_batch_threshold

    @cached_property
    def cudagraph_padding(self) -> compat.CudaGraphPadding:
        """The padding rules of the GPU model runner this vLLM runs the harness's config with."""
        with builder_context(self.vllm_config, self.gpu, self.module):
            return compat.cudagraph_padding(compat.model_runner(self.vllm_config))

    def padded(self, batch: Batch, num_tokens_padded: int) -> Batch:
        """``batch`` replayed on a CUDA graph of ``num_tokens_padded`` tokens, padded as the runner pads it."""
        return padded_to_cuda_graph(batch, num_tokens_padded, self.decode_threshold, self.options.max_num_seqs,
                                    self.cudagraph_padding)

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
        return stack

    def build(self, batch: Batch, watch_syncs: bool = False, builder: Any = None) -> BuildResult:
        """``build()`` of ``builder`` (default: the harness's) on ``batch``; with ``watch_syncs``, under a fresh
        host-sync sentinel (and, on a GPU, CUDA's sync debug mode) whose events the result carries."""
        builder = builder or self.builder
        device_batch = self.device_batch(batch)
        self._plans.clear()
        with builder_context(self.vllm_config, self.gpu, self.module, self.options), self._kernel_fakes():
            metadata, sentinel, cuda_syncs = run_build(builder, device_batch, self.device, watch_syncs)
        return BuildResult(metadata, device_batch, list(self._plans), sentinel, cuda_syncs)


def run_build(builder, device_batch: DeviceBatch, device: torch.device, watch_syncs: bool):
    """``builder.build()`` on ``device_batch``: (metadata, sentinel or None, what CUDA's sync debug mode saw or None).

    With ``watch_syncs``, under a fresh host-sync sentinel (and, on a GPU, CUDA's sync debug mode). On a CPU
    a sentinel always runs: it keeps device and host apart, so a device-to-host copy returns a new tensor, as
    it does on a GPU, instead of the device tensor itself."""
    if not watch_syncs and device.type != "cpu":
        return builder.build(0, device_batch.common), None, None
    sentinel = HostSyncSentinel(device_objects=(device,))
    sentinel.tag(*device_batch.device_tensors.values())
    sentinel.tag(*(t for _, t, on_device in persistent_buffers(builder) if on_device))
    with sentinel, cuda_sync_warnings() as cuda_syncs:
        metadata = builder.build(0, device_batch.common)
    if not watch_syncs:
        return metadata, None, None
    return metadata, sentinel, cuda_syncs if device.type == "cuda" else None
