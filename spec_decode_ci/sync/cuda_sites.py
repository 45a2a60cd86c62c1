"""Where a GPU really synchronizes: torch's sync debug mode on a CUDA machine, each synchronizing operation
traced to its site in vLLM or FlashInfer (``cuda_sync_sites``), and the site of a sync that sync debug mode
"error" refused (``refused_sync_site``)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

CUDA_SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's sync debug mode, "warn"


@dataclass(frozen=True)
class SyncSite:
    """Where a host sync was called from: the innermost frame in one of the packages asked for (by module name,
    which stays the same wherever the package is installed), its function and its source line; the modules of
    the frames below it (torch's own, e.g. torch.compile's) and the package functions above it."""

    module: str
    line: int
    function: str
    code: str
    inner: tuple[str, ...] = ()  # modules of the frames between the site and the sync, innermost first
    callers: tuple[str, ...] = ()  # "module.function" of the package frames that called the site, innermost first

    @property
    def compiling(self) -> bool:
        """The sync happened inside torch.compile's tracing or compiling (not in code it compiled)."""
        return any(m.startswith(("torch._dynamo", "torch._inductor", "torch.fx")) for m in self.inner)

    def within(self, qualified: str) -> bool:
        """``qualified`` ("module.function") is the site itself or one of its callers."""
        return qualified == f"{self.module}.{self.function}" or qualified in self.callers

    def __str__(self) -> str:
        below = f"; below it {', '.join(self.inner[:3])}" if self.inner else ""
        called = f"; called from {' < '.join(c.rsplit('.', 2)[-2] + '.' + c.rsplit('.', 1)[-1] for c in self.callers[:3])}" \
            if self.callers else ""
        return f"{self.module.replace('.', '/')}.py:{self.line} in {self.function}: {self.code}{called}{below}"


def _sync_site(frame, packages: tuple[str, ...]) -> SyncSite:
    """The innermost frame of ``frame``'s stack whose module is in ``packages`` (else the innermost frame)."""
    import linecache

    stack: list[tuple[Any, str]] = []  # (frame, its module's name), innermost first
    while frame is not None:
        name = frame.f_globals.get("__name__", frame.f_code.co_filename)
        if name not in ("warnings", __name__):
            stack.append((frame, name))
        frame = frame.f_back
    if not stack:
        return SyncSite("<unknown>", 0, "<unknown>", "")
    ours = [name.split(".")[0] in packages for _, name in stack]
    at = ours.index(True) if any(ours) else 0
    (site, module), rest = stack[at], range(at + 1, len(stack))
    callers = tuple(f"{stack[i][1]}.{stack[i][0].f_code.co_name}" for i in rest if ours[i])
    return SyncSite(module, site.f_lineno, site.f_code.co_name,
                    linecache.getline(site.f_code.co_filename, site.f_lineno).strip(),
                    inner=tuple(dict.fromkeys(name for _, name in stack[:at])), callers=callers[:12])


def refused_sync_site(error: BaseException, packages: tuple[str, ...] = ("vllm", "flashinfer")) -> SyncSite | None:
    """Where a synchronizing CUDA operation was refused by sync debug mode "error" (torch's error, or vLLM's sync
    check raising its own from it): the innermost frame in ``packages`` where torch's error was raised. None for
    any other error."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    refused = next((e for e in chain if CUDA_SYNC_WARNING in str(e)), None)
    if refused is None:
        return None
    tb = refused.__traceback__
    if tb is None:
        return SyncSite("<unknown>", 0, "<unknown>", "")
    while tb.tb_next is not None:
        tb = tb.tb_next
    return _sync_site(tb.tb_frame, packages)


@contextmanager
def cuda_sync_sites(packages: tuple[str, ...] = ("vllm", "flashinfer")) -> Iterator[list[SyncSite]]:
    """On a GPU, every synchronizing CUDA operation torch's sync debug mode ("warn") reports inside the block,
    each with its call site in ``packages``, appended as it happens; empty without CUDA.

    The warning is read where it is shown, while the caller's stack is still there. A hook installed before
    (vLLM's own sync check) still sees it."""
    sites: list[SyncSite] = []
    if not torch.cuda.is_available():
        yield sites
        return
    import sys
    import warnings

    previous_mode = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.filterwarnings("always", message=".*" + CUDA_SYNC_WARNING)
        shown = warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None):
            if CUDA_SYNC_WARNING not in str(message):
                return shown(message, category, filename, lineno, file, line)
            sites.append(_sync_site(sys._getframe(1), packages))
            if getattr(shown, "__module__", "warnings") != "warnings":  # someone else's hook: vLLM's check
                shown(message, category, filename, lineno, file, line)
            return None

        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield sites
        finally:
            torch.cuda.set_sync_debug_mode(previous_mode)


@contextmanager
def cuda_sync_warnings() -> Iterator[list[str]]:
    """On a GPU, what CUDA's sync debug mode ("warn") reports inside the block, one line per sync with its call
    site; empty without CUDA."""
    syncs: list[str] = []
    with cuda_sync_sites() as sites:
        yield syncs
    syncs += [str(site) for site in sites]
