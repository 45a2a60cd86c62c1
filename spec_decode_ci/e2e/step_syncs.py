"""Host syncs anywhere in a speculative decoding step, recorded per step with their call sites.

A step is what the worker runs between the scheduler's output and the next step's input: ``execute_model``
(the target's inputs, metadata builds and forward), ``sample_tokens`` (sampling, rejection, the drafter's
propose and its metadata builds) and ``take_draft_token_ids``. Each runs under CUDA's sync debug mode; every
sync it reports is kept with the innermost vLLM or FlashInfer frame that called it. A sync is allowed only at a
site listed in ``ALLOWED_SYNCS`` with its reason; any other site fails the suite, named file:line.
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Iterator
from unittest import mock

from spec_decode_ci import compat
from spec_decode_ci.sync import SyncSite, cuda_sync_sites


@dataclass(frozen=True)
class AllowedSync:
    reason: str
    within: str | None = None  # "module.function": the sync is there or in code it calls
    while_compiling: bool = False  # the sync is inside torch.compile's tracing or compiling
    only_without_trtllm: bool = False  # allowed only where some attention phase is not TRTLLM (Hopper)

    def allows(self, site: SyncSite, all_trtllm: bool) -> bool:
        if self.only_without_trtllm and all_trtllm:
            return False
        if self.while_compiling and not site.compiling:
            return False
        return self.within is None or site.within(self.within)


ALLOWED_SYNCS: tuple[AllowedSync, ...] = (
    AllowedSync("FlashInfer's native (non-TRTLLM) phases plan on the host from seq_lens: build() copies them "
                "once where a phase is not TRTLLM (every phase on Hopper; test_mixed_batches_without_host_sync "
                "holds it to one per build). PR #39546 keeps all-TRTLLM batches, Blackwell's, off it",
                within="vllm.v1.attention.backends.flashinfer.build", only_without_trtllm=True),
    AllowedSync("torch.compile traces and compiles a vLLM function (e.g. the async spec-decode correction of "
                "num_computed_tokens) on its first call for a new shape; the compiled code then runs without a "
                "sync. vLLM's own sync check exempts compilation too", while_compiling=True),
)


@dataclass
class StepLog:
    steps: list[list[SyncSite]] = field(default_factory=list)

    @property
    def syncs_per_step(self) -> list[int]:
        return [len(step) for step in self.steps]

    def sites(self) -> Counter[SyncSite]:
        return Counter(site for step in self.steps for site in step)

    def not_allowed(self, all_trtllm: bool,
                    allowed: tuple[AllowedSync, ...] = ALLOWED_SYNCS) -> Counter[SyncSite]:
        return Counter({site: n for site, n in self.sites().items()
                        if not any(a.allows(site, all_trtllm) for a in allowed)})


@contextmanager
def observed_steps(log: StepLog) -> Iterator[None]:
    """Every step the worker runs recorded in ``log``: ``execute_model`` opens a step, the others add to it."""
    worker = compat.gpu_worker_class()

    def observed(name: str):
        original = getattr(worker, name)

        def method(self, *args, **kwargs):
            if name == "execute_model" or not log.steps:
                log.steps.append([])
            with cuda_sync_sites() as sites:
                try:
                    return original(self, *args, **kwargs)
                finally:
                    log.steps[-1] += sites
        return method

    with ExitStack() as stack:
        for name in compat.GPU_WORKER_STEP_METHODS:
            stack.enter_context(mock.patch.object(worker, name, observed(name)))
        yield
