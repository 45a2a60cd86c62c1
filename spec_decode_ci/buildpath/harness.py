"""The harness base every backend's harness is: a real builder on the emulated device, the batch handed to its
``build()`` and one build under the backend's fakes and contexts."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from spec_decode_ci.buildpath.batches import Batch, DeviceBatch, cdiv, common_attn_metadata
from spec_decode_ci.buildpath.run import BuildResult, PlanCall, run_build
from spec_decode_ci.buildpath.split import split


class BuildHarnessBase:
    """A backend's harness provides ``options`` (a ``SpecDecodeOptions``), ``page_size``, ``device``,
    ``builder``, ``require_uniform_decodes`` and ``build_context()``; it may provide ``local_seq_lens`` (DCP) and
    ``plans``."""

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

    def host_bound_excess(self, batch: Batch) -> list[int]:
        """How far the runner's host upper bound of each request's seq_len (``seq_lens_cpu_upper_bound``) runs
        ahead of it. Under async speculative decoding vLLM's runner assumes every draft of the previous step was
        accepted, so a decode's bound exceeds its length by up to k, the drafts rejected (here (i + 1) mod (k + 1)
        for decode i); prefills, and every request without speculation, get exact bounds."""
        k = self.options.num_spec_tokens
        decodes = split(batch, self.decode_threshold, self.require_uniform_decodes).num_decodes if k else 0
        return [(i + 1) % (k + 1) if i < decodes else 0 for i in range(batch.num_reqs)]

    def device_batch(self, batch: Batch) -> DeviceBatch:
        """The ``CommonAttentionMetadata`` ``build()`` is given for ``batch`` (a new one each call)."""
        if batch.page_size != self.page_size:
            raise ValueError(f"batch page size {batch.page_size} != builder page size {self.page_size}")
        return common_attn_metadata(batch, self.device, cdiv(self.options.max_model_len, self.page_size),
                                    self.local_seq_lens(batch), self.host_bound_excess(batch))

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
