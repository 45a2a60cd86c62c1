"""One pytest run in a child process, as the self-checks and the harness's own breakage tests make them: a
plugin set, a marker, an environment; its exit status, output, red tests and where each failure was raised."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

RED_LINE = re.compile(r"^(?:FAILED|ERROR) \S*?::(?:\w+::)?(\S+)", re.M)  # -rfE lines; the id without a class


FAILURE_LOG = "SPEC_DECODE_CI_FAILURE_LOG"  # the file the child's plugin appends each failure's raising site to


@dataclass(frozen=True)
class Failure:
    """Where one failing test's exception was raised (the innermost frame)."""

    test: str  # function[parameters]
    module: str
    line: int
    exception: str  # "Type: first line of the message"
    by_a_check: bool  # an assertion of the harness or of the test itself, not an error inside vLLM or torch

    def __str__(self) -> str:
        return f"{self.test}: {self.exception} (raised in {self.module}:{self.line})"


def record_failure(item, excinfo) -> None:
    """In the child: append ``item``'s failure to the failure log, where the parent asked for one."""
    log = os.environ.get(FAILURE_LOG)
    if not log:
        return
    import pytest

    # the innermost frame outside pytest's own (pytest.fail raises in _pytest.outcomes)
    entry = next((e for e in reversed(excinfo.traceback)
                  if e.frame.f_globals.get("__name__", "").split(".")[0] not in ("_pytest", "pytest")),
                 excinfo.traceback[-1])
    module = entry.frame.f_globals.get("__name__", "?")
    in_harness = module.split(".")[0] == "spec_decode_ci" or Path(str(entry.path)) == Path(str(item.path))
    check = isinstance(excinfo.value, (AssertionError, pytest.fail.Exception))
    message = str(excinfo.value).strip().splitlines()
    failure = {"test": item.name, "module": module, "line": entry.lineno + 1, "by_a_check": in_harness and check,
               "exception": f"{excinfo.typename}: {message[0][:300] if message else ''}"}
    with open(log, "a") as out:
        out.write(json.dumps(failure) + "\n")


@dataclass(frozen=True)
class PytestRun:
    returncode: int
    output: str
    wall_s: float
    failures: tuple[Failure, ...] = ()

    @property
    def red(self) -> set[str]:
        """The failed and errored tests, as ``function[parameters]``."""
        return set(RED_LINE.findall(self.output))

    @property
    def red_by_checks(self) -> set[str]:
        """The red tests whose every failure is an assertion of the harness or the test (not a crash)."""
        return self.red - {f.test for f in self.failures if not f.by_a_check}

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
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "failures.jsonl"
        start = time.perf_counter()
        proc = subprocess.run(command, env={**os.environ, **(env or {}), FAILURE_LOG: str(log)}, capture_output=True,
                              text=True)
        wall = time.perf_counter() - start
        failures = tuple(Failure(**json.loads(line)) for line in log.read_text().splitlines()) if log.exists() else ()
    return PytestRun(proc.returncode, proc.stdout, wall, failures)
