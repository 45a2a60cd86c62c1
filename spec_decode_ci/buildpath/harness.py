"""The harness base every backend's harness is: a real builder on the emulated device, the batch handed to its
``build()`` and one build under the backend's fakes and contexts."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from spec_decode_ci.buildpath.batches import Batch, DeviceBatch, cdiv, common_attn_metadata
from spec_decode_ci.buildpath.run import BuildResult, PlanCall, run_build


class BuildHarnessBase:
    """A backend's harness provides ``options`` (with ``max_model_len``), ``page_size``, ``device``,
    ``builder`` and ``build_context()``; it may provide ``local_seq_lens`` (DCP) and ``plans``."""

    options: Any
    page_size: int
    builder: Any

    @property
    def decode_threshold(self) -> int:
        """Requests with at most this many query tokens are decodes (vLLM's reorder threshold: 1 + k)."""
        return self.builder.reorder_batch_threshold

    def local_seq_lens(self, batch: Batch) -> list[int] | None:
        """This rank's share of each sequence under decode context parallelism (None: no DCP)."""
        return None

    def device_batch(self, batch: Batch) -> DeviceBatch:
        """The ``CommonAttentionMetadata`` ``build()`` is given for ``batch`` (a new one each call)."""
        if batch.page_size != self.page_size:
            raise ValueError(f"batch page size {batch.page_size} != builder page size {self.page_size}")
        return common_attn_metadata(batch, self.device, cdiv(self.options.max_model_len, self.page_size),
                                    self.local_seq_lens(batch))

    def build_context(self) -> AbstractContextManager:
        """What ``build()`` runs under: the emulated platform, vLLM's config, the backend's kernel fakes."""
        raise NotImplementedError

    def plans(self) -> list[PlanCall]:
        """The plan() calls the last build made (backends whose kernels are planned on the host)."""
        return []

    def build(self, batch: Batch, watch_syncs: bool = False, builder: Any = None) -> BuildResult:
        """``build()`` of ``builder`` (default: the harness's) on ``batch``; with ``watch_syncs``, under a fresh
        host-sync sentinel (and, on a GPU, CUDA's sync debug mode) whose events the result carries."""
        device_batch = self.device_batch(batch)
        with self.build_context():
            metadata, sentinel, cuda_syncs = run_build(builder or self.builder, device_batch, self.device, watch_syncs)
        return BuildResult(metadata, device_batch, self.plans(), sentinel, cuda_syncs)
