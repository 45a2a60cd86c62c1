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

from spec_decode_ci.buildpath.harness import BuildHarnessBase
from spec_decode_ci.buildpath.run import builder_device
from spec_decode_ci.emulation import BLACKWELL, EmulatedGpu
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
class MlaBuildHarness(BuildHarnessBase):
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
    def require_uniform_decodes(self) -> bool:
        return self.builder.query_len_support.name != "VARLEN"

    @property
    def workspace_rows(self) -> int:
        return self.builder.chunked_prefill_workspace_size

    def build_context(self) -> ExitStack:
        self.scheduling.calls.clear()
        stack = ExitStack()
        stack.enter_context(builder_context(self.vllm_config, self.gpu, self.backend_module, self.common_module))
        stack.enter_context(torch.no_grad())
        stack.enter_context(self._kernel_fakes())
        return stack

    def _kernel_fakes(self) -> ExitStack:
        stack = ExitStack()
        module = self.backend_module or sys.modules[type(self.builder).__module__]
        if self.device.type == "cpu" and hasattr(module, "get_mla_metadata"):
            # Hardware boundary: FlashMLA's scheduling kernel runs on the GPU only.
            stack.enter_context(mock.patch.object(module, "get_mla_metadata", self.scheduling))
        return stack


def make_harness(options: MlaOptions, gpu: EmulatedGpu) -> MlaBuildHarness:
    """The registered factory (``spec_decode_ci.backends``): on the self-check's copies (the backend's module
    built on a regressed copy of vLLM's common MLA module) where ``--regression`` asks for them."""
    from spec_decode_ci.backends import BACKENDS
    from spec_decode_ci.buildpath import regressions
    from spec_decode_ci.mla.builder import backend_class

    copies = regressions.requested(BACKENDS["mla"], backend_class(options.backend, gpu).get_builder_cls())
    backend_module, common_module = copies or (None, None)
    return MlaBuildHarness(options, gpu, backend_module=backend_module, common_module=common_module)
