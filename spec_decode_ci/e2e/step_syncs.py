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
    module: str  # the vLLM module the sync is called from
    function: str  # the function in it (line numbers move between releases; function names rarely)
    reason: str
    only_without_trtllm: bool = False  # allowed only where some attention phase is not TRTLLM (Hopper)

    def allows(self, site: SyncSite, all_trtllm: bool) -> bool:
        return (site.module == self.module and site.function == self.function
                and not (self.only_without_trtllm and all_trtllm))


ALLOWED_SYNCS: tuple[AllowedSync, ...] = (
    AllowedSync("vllm.v1.attention.backends.flashinfer", "build",
                "FlashInfer's native (non-TRTLLM) phases plan on the host from seq_lens: one copy per build where "
                "a phase is not TRTLLM (every phase on Hopper); the fix of PR #39546 keeps all-TRTLLM batches off "
                "it", only_without_trtllm=True),
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
