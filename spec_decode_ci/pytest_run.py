"""One pytest run in a child process, as the self-checks and the harness's own breakage tests make them: a
plugin set, a marker, an environment; its exit status, output, red tests and where each failure was raised."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from spec_decode_ci.backends import BACKENDS

# What a server that forks the tier's runs against vLLM's copies imports once (``ForkedPytest``): every registered
# backend's builder module, and the plugin the tier runs with.
TIER_PRELOAD = (*(b.module for b in BACKENDS.values()), "spec_decode_ci.pytest_plugin")
# The harness plugin's option that builds the tier's harnesses on a copy of vLLM's module (spec_decode_ci.buildpath
# .regressions): a regression of spec_decode_ci.patches, an operator mutant, or ``none`` (copied unchanged).
REGRESSION_OPTION = "--regression"


def regression_args(name: str) -> tuple[str, ...]:
    """The pytest arguments that run the tier against the copy ``name`` asks for."""
    return (REGRESSION_OPTION, name)

RED_LINE = re.compile(r"^(?:FAILED|ERROR) \S*?::(?:\w+::)?(\S+)", re.M)  # -rfE lines; the id without a class


FAILURE_LOG = "SPEC_DECODE_CI_FAILURE_LOG"  # the file the child's plugin appends each failure's raising site to
ONLY_TESTS = "SPEC_DECODE_CI_ONLY_TESTS"  # a JSON list of test names (function[parameters]) the child runs alone


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
    max_rss_mib: int | None = None  # the run's process's peak resident memory, where it was measured
    errors: str = ""  # what the run wrote to stderr (a usage error, a crash before pytest reported)

    @property
    def red(self) -> set[str]:
        """The failed and errored tests, as ``function[parameters]``."""
        return set(RED_LINE.findall(self.output))

    @property
    def red_by_checks(self) -> set[str]:
        """The red tests whose every failure is an assertion of the harness or the test (not a crash)."""
        return self.red - {f.test for f in self.failures if not f.by_a_check}

    def tail(self, chars: int = 3000) -> str:
        """The end of the run's output, and of its stderr where it wrote any."""
        said = self.output[-chars:]
        return f"{said}\n[stderr]\n{self.errors[-chars:]}" if self.errors.strip() else said


def pytest_args(targets: tuple[str, ...], marker: str | None, plugins: tuple[str, ...], workers: int = 0,
                extra: tuple[str, ...] = ()) -> list[str]:
    """pytest's arguments for a run on ``targets`` (``--pyargs`` module names, or paths), the harness's plugin
    after ``plugins``."""
    pyargs = ("--pyargs",) if targets and all("/" not in t and not t.endswith(".py") for t in targets) else ()
    return ["-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:warnings",
            *(["-n", str(workers)] if workers else []),
            *(arg for plugin in (*plugins, "spec_decode_ci.pytest_plugin") for arg in ("-p", plugin)),
            *(["-m", marker] if marker else []), *extra, *pyargs, *targets]


def _failures(log: Path) -> tuple[Failure, ...]:
    return tuple(Failure(**json.loads(line)) for line in log.read_text().splitlines()) if log.exists() else ()


def run_pytest(*targets: str, marker: str | None = None, plugins: tuple[str, ...] = (),
               env: dict[str, str] | None = None, workers: int = 0, extra: tuple[str, ...] = (),
               only: tuple[str, ...] = (), timeout_s: int | None = None) -> PytestRun:
    """``pytest`` on ``targets`` (``--pyargs`` module names, or paths) in a child process with the harness's
    plugin after ``plugins``, ``env`` over this process's environment; with ``only``, just the collected tests
    so named (``function[parameters]``)."""
    command = [sys.executable, "-m", "pytest", *pytest_args(targets, marker, plugins, workers, extra)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "failures.jsonl"
        start = time.perf_counter()
        try:
            proc = subprocess.run(command, env={**os.environ, **(env or {}), **_run_env(log, only)},
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            output, errors = (out.decode(errors="replace") if isinstance(out, bytes) else out or ""
                              for out in (exc.stdout, exc.stderr))
            return PytestRun(TIMED_OUT, output, time.perf_counter() - start, _failures(log), errors=errors)
        wall = time.perf_counter() - start
        failures = _failures(log)
    return PytestRun(proc.returncode, proc.stdout, wall, failures, errors=proc.stderr)


def _run_env(log: Path, only: tuple[str, ...]) -> dict[str, str]:
    return {FAILURE_LOG: str(log), **({ONLY_TESTS: json.dumps(list(only))} if only else {})}


def keep_only_named(config, items) -> None:
    """In the child (the harness's plugin): the collected tests $SPEC_DECODE_CI_ONLY_TESTS names, the rest
    deselected."""
    names = os.environ.pop(ONLY_TESTS, None)  # not passed on to runs the tests themselves start
    if not names:
        return
    wanted = set(json.loads(names))
    deselected = [item for item in items if item.name not in wanted]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.name in wanted]


class ForkedPytest:
    """pytest runs, each a fresh session in a child forked from one server process that imported ``preload``
    once (``import vllm`` alone costs about 20 s on a CPU): the runs share the imports and nothing else; each
    gets this process's environment with its own ``env`` over it. POSIX only (``os.fork``). A forked child cannot
    use a GPU its parent initialised, so a preload whose import initialises CUDA (FlashInfer's asks for each GPU's
    capability) is left for each run to import itself (``left_to_runs``); where CUDA is initialised in the server
    all the same, every run is a child process of its own."""

    def __init__(self, preload: tuple[str, ...] = ("vllm",)):
        self._server = subprocess.Popen(
            [sys.executable, "-c", "from spec_decode_ci.pytest_run import _fork_server; _fork_server()", *preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._left_to_runs: tuple[str, ...] | None = None

    def _reply(self) -> dict:
        reply = self._server.stdout.readline()
        if not reply:
            raise RuntimeError(f"the forking pytest server ended (exit {self._server.poll()}); see its stderr")
        return json.loads(reply)

    @property
    def left_to_runs(self) -> tuple[str, ...]:
        """The preloads the server did not import, as their import initialises CUDA: each run imports them."""
        if self._left_to_runs is None:
            self._left_to_runs = tuple(self._reply()["left_to_runs"])  # the server's first line, once preloaded
        return self._left_to_runs

    def run(self, *targets: str, marker: str | None = None, plugins: tuple[str, ...] = (),
            env: dict[str, str] | None = None, extra: tuple[str, ...] = (), only: tuple[str, ...] = (),
            timeout_s: int | None = None) -> PytestRun:
        """As ``run_pytest``, which it falls back to where the server cannot fork (CUDA initialised there: a
        forked child could not use the GPU). With ``timeout_s``, a run still going after that many seconds is
        ended by SIGALRM (exit status ``TIMED_OUT``)."""
        with tempfile.TemporaryDirectory() as tmp:
            log, output = Path(tmp) / "failures.jsonl", Path(tmp) / "output.txt"
            request = {"args": pytest_args(targets, marker, plugins, extra=extra),
                       "env": {**(env or {}), **_run_env(log, only)},
                       "output": str(output), "timeout_s": timeout_s}
            self.left_to_runs  # noqa: B018 (the preload's line, read before the run's)
            start = time.perf_counter()
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            answer = self._reply()
            wall = time.perf_counter() - start
            if answer.get("cannot_fork"):
                return run_pytest(*targets, marker=marker, plugins=plugins, env=env, extra=extra, only=only,
                                  timeout_s=timeout_s)
            return PytestRun(answer["returncode"], output.read_text(errors="replace") if output.exists() else "",
                             wall, _failures(log), answer["max_rss_mib"])

    def close(self) -> None:
        if self._server.poll() is None:
            self._server.stdin.close()
            self._server.wait()


def _fork_server() -> None:
    """The server of ``ForkedPytest``: imports its arguments (``_preload``), then forks one pytest run per request
    line."""
    # the replies get the pipe to themselves: whatever the imports print or log (vLLM logs to stdout) goes to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    left = _preload(sys.argv[1:])
    if left:
        print(f"spec-decode-ci: importing {', '.join(left)} initialises CUDA: each forked run imports it itself",
              file=sys.stderr, flush=True)
    print(json.dumps({"left_to_runs": left}), file=replies, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if _cuda_initialised():
            print(json.dumps({"cannot_fork": "CUDA is initialised in the server"}), file=replies, flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            _forked_run(request)
        _, status, usage = os.wait4(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "max_rss_mib": usage.ru_maxrss // 1024}),
              file=replies, flush=True)


TIMED_OUT = -signal.SIGALRM  # a forked run's exit status when its timeout_s ran out
_INITIALISES_CUDA = 101  # the exit status of a preload's trial import that initialised CUDA


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _preload(names: list[str]) -> list[str]:
    """Import ``names`` in order, each first in a forked child: where its import leaves CUDA uninitialised that
    child goes on as the server (this process only waits for it and exits as it does); where not, the child exits
    and this process goes on without the module. Returns the names left out."""
    import importlib

    left = []
    for name in names:
        pid = os.fork()
        if pid == 0:
            importlib.import_module(name)
            if _cuda_initialised():
                os._exit(_INITIALISES_CUDA)
            continue
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != _INITIALISES_CUDA:
            os._exit(code)  # the child served every run (or its import raised)
        left.append(name)
    return left


def _forked_run(request: dict) -> None:
    """In the forked child: one pytest session, its output to the request's file; never returns."""
    code = 3  # pytest's "internal error", where the run itself raised
    try:
        os.environ.update(request["env"])
        if request.get("timeout_s"):
            signal.alarm(int(request["timeout_s"]))  # the default action ends the process
        out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the server's requests are not the run's to read
        import pytest

        code = int(pytest.main(request["args"]))
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
