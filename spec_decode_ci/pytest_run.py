"""One pytest run in a child process, as the self-checks and the harness's own breakage tests make them: a
plugin set, a marker, an environment; its exit status, output and red tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

RED_LINE = re.compile(r"^(?:FAILED|ERROR) \S*?::(?:\w+::)?(\S+)", re.M)  # -rfE lines; the id without a class


@dataclass(frozen=True)
class PytestRun:
    returncode: int
    output: str
    wall_s: float

    @property
    def red(self) -> set[str]:
        """The failed and errored tests, as ``function[parameters]``."""
        return set(RED_LINE.findall(self.output))

    def tail(self, chars: int = 3000) -> str:
        return self.output[-chars:]


def run_pytest(*targets: str, marker: str | None = None, plugins: tuple[str, ...] = (),
               env: dict[str, str] | None = None, workers: int = 0, extra: tuple[str, ...] = ()) -> PytestRun:
    """``pytest`` on ``targets`` (``--pyargs`` module names, or paths) in a child process with the harness's
    plugin after ``plugins``, ``env`` over this process's environment."""
    pyargs = ("--pyargs",) if targets and all("/" not in t and not t.endswith(".py") for t in targets) else ()
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:warnings",
               *(["-n", str(workers)] if workers else []),
               *(arg for plugin in (*plugins, "spec_decode_ci.pytest_plugin") for arg in ("-p", plugin)),
               *(["-m", marker] if marker else []), *extra, *pyargs, *targets]
    start = time.perf_counter()
    proc = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    return PytestRun(proc.returncode, proc.stdout, time.perf_counter() - start)
