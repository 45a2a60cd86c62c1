"""Where a long call spends its time, without a profiler to install: Python's ``faulthandler`` dumps the stacks
of every thread at a fixed interval, and the samples are counted by the innermost frame of the packages asked
for (vLLM, FlashInfer, Triton, torch). Beside it, what the process did meanwhile: CPU seconds and bytes read
from disk; a wall time far above both is time spent waiting (a network timeout, a GPU, a lock).
"""

from __future__ import annotations

import faulthandler
import re
import resource
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
PACKAGES = ("vllm", "flashinfer", "triton", "torch", "spec_decode_ci")


@dataclass
class Samples:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    disk_read_mib: float | None = None  # None where the kernel does not say (/proc/self/io)
    frames: Counter = field(default_factory=Counter)  # "package/module.py:function" -> samples
    taken: int = 0

    def top(self, n: int = 8) -> list[tuple[str, int]]:
        return self.frames.most_common(n)


def innermost(stack: list[tuple[str, str]], packages: tuple[str, ...] = PACKAGES) -> str | None:
    """The innermost frame of ``stack`` (outermost first, as faulthandler's most-recent-first reversed) that
    lies in one of ``packages``, as ``package/…/module.py:function``."""
    for path, func in reversed(stack):
        parts = path.replace("\\", "/").split("/")
        for i, part in enumerate(parts[:-1]):
            if part in packages:
                return f"{'/'.join(parts[i:])}:{func}"
    return None


def parse(dump: str, thread: str = "Current thread") -> list[list[tuple[str, str]]]:
    """Stacks of one thread in a faulthandler dump, each outermost frame first."""
    stacks: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = None
    for line in dump.splitlines():
        if THREAD.match(line):
            current = [] if line.startswith(thread) else None
            if current is not None:
                stacks.append(current)
        elif current is not None and (m := FRAME.match(line)):
            current.insert(0, (m["file"], m["func"]))
    return stacks


def _disk_read_bytes() -> int | None:
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("read_bytes:"))
    except (OSError, StopIteration, ValueError):
        return None


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def sampled(every_s: float = 2.0, packages: tuple[str, ...] = PACKAGES) -> Iterator[Samples]:
    """Samples the calling thread's stack every ``every_s`` seconds while the block runs (at least once at the
    end), and its wall time, CPU time and disk reads; the result is filled in when the block ends."""
    samples = Samples()
    read0, cpu0, t0 = _disk_read_bytes(), _cpu_seconds(), time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as out:
        faulthandler.dump_traceback_later(every_s, repeat=True, file=out)
        try:
            yield samples
        finally:
            faulthandler.cancel_dump_traceback_later()
            samples.wall_s, samples.cpu_s = time.perf_counter() - t0, _cpu_seconds() - cpu0
            read1 = _disk_read_bytes()
            if read0 is not None and read1 is not None:
                samples.disk_read_mib = (read1 - read0) / 2**20
            out.flush()
            out.seek(0)
            # the dumps are written by faulthandler's watchdog thread: the sampled thread is "Thread 0x…"
            # there, "Current thread" only in a dump taken from the thread itself
            ident = f"Thread 0x{threading.get_ident():016x}"
            stacks = parse(out.read(), thread=ident)
            samples.taken = len(stacks)
            samples.frames.update(f for f in (innermost(s, packages) for s in stacks) if f)


def report(label: str, samples: Samples, n: int = 8) -> str:
    """A few lines: wall, CPU and disk figures, then the most sampled frames with their share."""
    disk = "n/a" if samples.disk_read_mib is None else f"{samples.disk_read_mib:.0f} MiB"
    lines = [f"{label}: wall {samples.wall_s:.1f} s, process CPU {samples.cpu_s:.1f} s, disk reads {disk}, "
             f"{samples.taken} stack samples"]
    lines += [f"    {count / samples.taken:5.0%}  {frame}" for frame, count in samples.top(n)] if samples.taken else []
    return "\n".join(lines)
