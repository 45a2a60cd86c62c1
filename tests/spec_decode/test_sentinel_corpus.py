"""The host-sync sentinel's verdicts on a CPU equal CUDA's sync debug mode on a GPU, snippet by snippet.

CPU half (every CI run): the sentinel's verdict equals each snippet's recorded verdict. GPU half (where
CUDA exists): ``torch.cuda.set_sync_debug_mode("error")`` gives that same verdict. Run both on a GPU machine
to check the agreement end to end; ``python -m spec_decode_ci.suites.test_sentinel_corpus`` prints the table.
"""

from __future__ import annotations

import sys

import pytest
import torch

from spec_decode_ci.sync.corpus import CORPUS, OPS, Snippet, inputs, measure, unrecorded
from spec_decode_ci.sync import HostSyncSentinel

pytestmark = pytest.mark.sentinel


def sentinel_verdict(snippet: Snippet) -> tuple[bool, list[str]]:
    device = torch.device("cpu")  # the emulated GPU
    sentinel = HostSyncSentinel(device_objects=(device,))

    def make_device(t: torch.Tensor) -> torch.Tensor:
        sentinel.tag(t)
        return t

    t = inputs(device, make_device)
    with sentinel:
        snippet.run(t)
    return bool(sentinel.events), [e.op for e in sentinel.events]


def cuda_verdict(snippet: Snippet) -> bool | str:
    return measure(snippet.run)


def host_waits(snippet: Snippet, sleep_cycles: int = 500_000_000) -> bool:
    """Queue a ~1 s GPU spin, run the snippet, and see whether the host call returned only after the spin. The
    snippet runs once before, on inputs of its own: loading a kernel the first time (CUDA's lazy loading) may
    synchronize the context, which is a wait the op itself does not make (seen under -n 4, where a worker meets a
    snippet's kernels first in this test)."""
    import time

    device = torch.device("cuda")
    snippet.run(inputs(device, lambda x: x.to(device)))
    t = inputs(device, lambda x: x.to(device))
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(sleep_cycles)
    queued = time.perf_counter() - start
    snippet.run(t)
    returned = time.perf_counter() - start
    torch.cuda.synchronize()
    spun = time.perf_counter() - start
    return returned > 0.5 * spun and returned > 10 * queued


def test_corpus_is_big_balanced_and_measured():
    """Every snippet has a verdict measured on a GPU, and both verdicts are well represented."""
    assert unrecorded() == [], "measure these on a GPU: python -m spec_decode_ci.sync.corpus --record FILE"
    assert len(CORPUS) >= 250 and len({s.name for s in CORPUS}) == len(CORPUS)
    assert sum(s.syncs for s in CORPUS) >= 100 and sum(not s.syncs for s in CORPUS) >= 100


@pytest.mark.parametrize("snippet", CORPUS, ids=[s.name for s in CORPUS])
def test_sentinel_on_cpu(snippet):
    synced, ops = sentinel_verdict(snippet)
    assert synced == snippet.syncs, f"sentinel says {'sync' if synced else 'no sync'} ({ops})"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: CUDA's sync debug mode is the ground truth")
@pytest.mark.parametrize("snippet", CORPUS, ids=[s.name for s in CORPUS])
def test_cuda_sync_debug_mode_on_gpu(snippet):
    assert cuda_verdict(snippet) == snippet.syncs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: timing against a queued GPU spin")
@pytest.mark.parametrize("snippet", OPS, ids=[s.name for s in OPS])
def test_host_waits_behind_queued_gpu_work(snippet):
    """An independent check of the hand-picked ops' verdicts: a sync makes the host wait for queued GPU work."""
    assert host_waits(snippet) == snippet.syncs


def agreement_table() -> str:
    rows = ["| snippet | recorded | sentinel (CPU) | CUDA sync debug mode | host waited behind a GPU spin |",
            "|---|---|---|---|---|"]
    cuda = torch.cuda.is_available()
    for s in CORPUS:
        mark = lambda v: "sync" if v else "-"  # noqa: E731
        rows.append(f"| {s.name} | {mark(s.syncs)} | {mark(sentinel_verdict(s)[0])} | "
                    f"{mark(cuda_verdict(s)) if cuda else 'n/a'} | {mark(host_waits(s)) if cuda else 'n/a'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(agreement_table() + "\n")
