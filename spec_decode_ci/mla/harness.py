"""Runs a real MLA metadata builder's ``build()`` on a batch and reads back what the kernels are handed.

One hardware-boundary fake lives here: on a CPU, FlashMLA's scheduling kernel (``get_mla_metadata``, a CUDA op)
records its arguments and returns an empty schedule; with CUDA the real kernel runs.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from spec_decode_ci.emulation import BLACKWELL, EmulatedGpu
from spec_decode_ci.flashinfer.batches import Batch, DeviceBatch, cdiv, common_attn_metadata
from spec_decode_ci.flashinfer.builder import builder_device
from spec_decode_ci.flashinfer.harness import BuildResult, run_build
from spec_decode_ci.sync import outside_sentinels
from spec_decode_ci.mla.builder import MlaOptions, builder_context, make_builder, page_size_of, vllm_config


class SchedulingOnHost:
    """Stand-in for FlashMLA's ``get_mla_metadata(seq_lens, num_q_tokens_per_head_k, num_heads_k, ...)``."""

    def __init__(self, sm_count: int):
        self.sm_count = sm_count
        self.calls: list[tuple[list[int], int, int]] = []

    def __call__(self, seq_lens, num_q_tokens_per_head_k, num_heads_k, *args, **kwargs):
        with outside_sentinels():
            self.calls.append((seq_lens.tolist(), int(num_q_tokens_per_head_k), int(num_heads_k)))
        return (torch.zeros(self.sm_count, 8, dtype=torch.int32, device=seq_lens.device),
                torch.zeros(seq_lens.numel() + 1, dtype=torch.int32, device=seq_lens.device))


@dataclass
class MlaBuildHarness:
    options: MlaOptions = field(default_factory=MlaOptions)
    gpu: EmulatedGpu = BLACKWELL
    # The self-check's copies: the backend's module built on a regressed copy of vLLM's common MLA module.
    backend_module: Any = None
    common_module: Any = None

    def __post_init__(self) -> None:
        self.vllm_config = vllm_config(self.options, self.gpu)
        self.page_size = page_size_of(self.options)
        self.device = builder_device()
        self.builder = self.fresh_builder()
        self.scheduling = SchedulingOnHost(self.gpu.sm_count)

    def fresh_builder(self):
        return make_builder(self.options, self.gpu, self.backend_module, self.device, self.common_module)

    @property
    def decode_threshold(self) -> int:
        return self.builder.reorder_batch_threshold

    @property
    def require_uniform_decodes(self) -> bool:
        return self.builder.query_len_support.name != "VARLEN"

    @property
    def workspace_rows(self) -> int:
        return self.builder.chunked_prefill_workspace_size

    def device_batch(self, batch: Batch) -> DeviceBatch:
        if batch.page_size != self.page_size:
            raise ValueError(f"batch page size {batch.page_size} != builder page size {self.page_size}")
        return common_attn_metadata(batch, self.device, cdiv(self.options.max_model_len, self.page_size))

    def build(self, batch: Batch, watch_syncs: bool = False, builder: Any = None) -> BuildResult:
        device_batch = self.device_batch(batch)
        self.scheduling.calls.clear()
        with builder_context(self.vllm_config, self.gpu, self.backend_module, self.common_module), torch.no_grad(), \
                self._kernel_fakes():
            metadata, sentinel, cuda_syncs = run_build(builder or self.builder, device_batch, self.device, watch_syncs)
        return BuildResult(metadata, device_batch, [], sentinel, cuda_syncs)

    def _kernel_fakes(self) -> ExitStack:
        stack = ExitStack()
        module = self.backend_module or sys.modules[type(self.builder).__module__]
        if self.device.type == "cpu" and hasattr(module, "get_mla_metadata"):
            # Hardware boundary: FlashMLA's scheduling kernel runs on the GPU only.
            stack.enter_context(mock.patch.object(module, "get_mla_metadata", self.scheduling))
        return stack
