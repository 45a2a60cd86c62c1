"""The build-path tier against operator mutants of vLLM's builders: each mutant compiled into the tier's private
copy of the module (as the self-check's regressions are), the tier run with ``-x`` in a child forked from one
process that imported vLLM once; red kills the mutant. Each mutant runs only the tests that call its function in the
tier's run against vLLM's module copied unchanged (the control, ``mutation.coverage``): the others cannot change
their outcome. Not only those that execute its line: a builder the tests share keeps what an earlier test's call
left (a cache filled once), which a later test reads without running that line. A mutant whose function no test
calls survives unrun. The score counts the mutants not listed as equivalent.

    python -m spec_decode_ci.mutation                          # every mutant of every backend
    python -m spec_decode_ci.mutation --backend flashinfer --sample 30 --seed 1 --workers 2
    python -m spec_decode_ci.mutation --list                   # the mutants, no runs

Exit status 0: every mutant run was killed or is listed as equivalent; 1: a survivor not listed, or a listed one
killed (the list went stale); 2: the tier is not green on vLLM's module copied unchanged (no verdicts).
"""

from __future__ import annotations

import argparse
import json
import queue
import tempfile
import random
import sys
import threading
import time
from dataclasses import dataclass, field

from spec_decode_ci import model_info
from spec_decode_ci.backends import BACKENDS
from spec_decode_ci.pytest_run import TIER_PRELOAD, regression_args
from spec_decode_ci.mutation.coverage import tests_calling
from spec_decode_ci.mutation import equivalent
from spec_decode_ci.mutation.mutants import BuildPathMutant, backend_mutants, missing_functions
from spec_decode_ci.patches import TIER
from spec_decode_ci.pytest_run import TIMED_OUT, ForkedPytest, PytestRun

CONTROL = "none"  # the regression that copies vLLM's module unchanged
TIMEOUT_S = 300  # a mutant's tier run past this is ended and counted killed (the build hangs: a test would too)
GOAL = 0.95  # the share of non-equivalent mutants the tier must kill (docs/selfcheck.md)


def mutated_backends() -> tuple[str, ...]:
    """The registered backends whose record names functions to mutate."""
    return tuple(name for name, backend in BACKENDS.items() if backend.mutated)


def sample(mutants: tuple[BuildPathMutant, ...], count: int | None, seed: int) -> tuple[BuildPathMutant, ...]:
    """``count`` of ``mutants`` drawn with ``seed`` (all for None or a count as large), in their own order."""
    if count is None or count >= len(mutants):
        return mutants
    chosen = set(random.Random(seed).sample(range(len(mutants)), count))
    return tuple(m for i, m in enumerate(mutants) if i in chosen)


@dataclass(frozen=True)
class Verdict:
    """The tier's answer to one mutant."""

    name: str  # mutant:<backend>:<number>, what the tier's copy was asked for
    key: str  # the mutant without line numbers (the equivalence registry's key)
    where: str  # file:line
    operator: str
    change: str  # before -> after
    outcome: str  # "killed", "survived" or "error" (the run ended neither red nor green)
    by: str  # the first red test, "timed out", the run's exit status; for a survivor, the tests run
    wall_s: float

    @property
    def equivalent(self) -> str | None:
        """The registry's reason this mutant cannot change behaviour (None: not listed)."""
        return equivalent.reason(self.key)

    def describe(self) -> str:
        return f"{self.where} [{self.operator}] {self.change}  ({self.key})"


def verdict_of(mutant: BuildPathMutant, run: PytestRun | None, tests: tuple[str, ...]) -> Verdict:
    """The verdict of ``run`` (None: not run, as no test calls the mutant's function)."""
    if run is None:
        outcome, by, wall = "survived", "no test calls its function", 0.0
    elif run.returncode == TIMED_OUT:
        outcome, by, wall = "killed", f"timed out after {TIMEOUT_S} s", run.wall_s
    elif run.returncode == 1:
        outcome, by, wall = "killed", min(run.red) if run.red else "exit 1", run.wall_s
    elif run.returncode < 0:  # the run died of a signal: the build ran out of memory (SIGKILL) or crashed
        outcome, by, wall = "killed", f"the run died of signal {-run.returncode}", run.wall_s
    elif run.returncode == 0:
        outcome, by, wall = "survived", f"{len(tests)} tests call its function: {', '.join(tests[:4])}" + (
            ", ..." if len(tests) > 4 else ""), run.wall_s
    else:
        outcome, by, wall = "error", f"pytest exit {run.returncode}: {run.tail(400)}", run.wall_s
    return Verdict(mutant.name, mutant.key, f"{mutant.file}:{mutant.mutant.line}", mutant.mutant.operator,
                   mutant.mutant.change, outcome, by, round(wall, 2))


def tier_run(runs: ForkedPytest, name: str, files: tuple[str, ...] = TIER, only: tuple[str, ...] = (),
             extra: tuple[str, ...] = ()) -> PytestRun:
    """The build-path tier (of ``files``, ``only`` these tests, where given) against the copy regression or mutant
    ``name`` asks for, stopping at the first red."""
    return runs.run(*files, marker="build_path", extra=(*regression_args(name), "-x", *extra), only=only,
                    timeout_s=TIMEOUT_S)


def control_calls(runs: ForkedPytest) -> dict[str, list[str]]:
    """The tier against vLLM's module copied unchanged, the mutated functions each test called;
    ``ControlNotGreen`` where the tier is red there."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/calls.json"
        control = tier_run(runs, CONTROL, extra=("--mutated-calls", path))
        if control.returncode != 0:
            raise ControlNotGreen(f"the build-path tier is not green on vLLM's module copied unchanged "
                                  f"(exit {control.returncode}): no mutant's verdict would mean anything\n"
                                  f"{control.tail()}")
        with open(path) as calls:
            return json.load(calls)


class ControlNotGreen(RuntimeError):
    """The tier is red on vLLM's module copied unchanged: no mutant's verdict would mean anything."""


def run_mutants(mutants: tuple[BuildPathMutant, ...], workers: int = 1,
                progress=lambda verdict, done, total: None) -> list[Verdict]:
    """The tier's verdict on each of ``mutants``, ``workers`` at a time (each a forking server of its own),
    after the control; ``ControlNotGreen`` where the control is red."""
    warm_up = model_info.start()  # one warm-up of vLLM's model-class facts for every run (None: the session's)
    servers = [ForkedPytest(preload=TIER_PRELOAD) for _ in range(max(1, min(workers, len(mutants))))]
    try:
        calls = control_calls(servers[0])
    except BaseException:
        for runs in servers:
            runs.close()
        if warm_up is not None:
            warm_up.stop()
        raise
    jobs: queue.Queue = queue.Queue()
    for mutant in mutants:
        jobs.put(mutant)
    verdicts: dict[str, Verdict] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()
    selections: dict[tuple, threading.Lock] = {}  # each selection's control, run once before its first mutant
    green: set[tuple] = set()

    def control_of(runs: ForkedPytest, files: tuple[str, ...], tests: tuple[str, ...]) -> None:
        """The unchanged copy against this selection of tests, once: green, or ``ControlNotGreen`` (tests that
        pass in the whole tier may not pass alone, and a mutant's red would then say nothing)."""
        with lock:
            gate = selections.setdefault((files, tests), threading.Lock())
        with gate:
            if (files, tests) in green:
                return
            control = tier_run(runs, CONTROL, files, only=tests)
            if control.returncode != 0:
                raise ControlNotGreen(f"the build-path tests {', '.join(tests)} are not green alone on vLLM's module "
                                      f"copied unchanged (exit {control.returncode}): red {sorted(control.red)}\n"
                                      f"{control.tail()}")
            green.add((files, tests))

    def work(runs: ForkedPytest) -> None:
        try:
            while not failures:
                try:
                    mutant = jobs.get_nowait()
                except queue.Empty:
                    return
                files, tests = tests_calling(calls, mutant.file, mutant.mutant.function)
                if tests:
                    control_of(runs, files, tests)
                run = tier_run(runs, mutant.name, files, only=tests) if tests else None
                verdict = verdict_of(mutant, run, tests)
                with lock:
                    verdicts[mutant.name] = verdict
                    progress(verdict, len(verdicts), len(mutants))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread)
            failures.append(exc)
        finally:
            runs.close()

    threads = [threading.Thread(target=work, args=(runs,)) for runs in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if warm_up is not None:
        warm_up.stop()
    if failures:
        raise failures[0]
    return [verdicts[m.name] for m in mutants]


@dataclass
class Score:
    """One backend's mutation score over the mutants run."""

    backend: str
    generated: int  # every mutant of this vLLM's functions
    missing_functions: tuple[str, ...]  # functions the record names that this vLLM does not define
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def killed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.outcome == "killed" and not v.equivalent]

    @property
    def equivalent(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.equivalent and v.outcome == "survived"]

    @property
    def survivors(self) -> list[Verdict]:
        """Mutants the tier let through that the registry does not list: a check is missing."""
        return [v for v in self.verdicts if v.outcome == "survived" and not v.equivalent]

    @property
    def stale(self) -> list[Verdict]:
        """Mutants listed as equivalent that the tier killed: the entry is wrong or vLLM's code changed."""
        return [v for v in self.verdicts if v.outcome == "killed" and v.equivalent]

    @property
    def errors(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.outcome == "error"]

    @property
    def rate(self) -> float | None:
        """Killed over the mutants run that are not equivalent."""
        counted = len(self.killed) + len(self.survivors) + len(self.stale)
        return (len(self.killed) + len(self.stale)) / counted if counted else None

    def as_figure(self) -> dict:
        return {"backend": self.backend, "generated": self.generated, "run": len(self.verdicts),
                "killed": len(self.killed) + len(self.stale), "equivalent": len(self.equivalent),
                "rate": None if self.rate is None else round(self.rate, 4), "goal": GOAL,
                "missing_functions": list(self.missing_functions),
                "survivors": [f"{v.where} [{v.operator}] {v.change}" for v in self.survivors],
                "stale_equivalents": [v.key for v in self.stale],
                "errors": [f"{v.name}: {v.by}" for v in self.errors]}

    def text(self) -> str:
        rate = "no mutants" if self.rate is None else f"{self.rate:.1%} killed of the non-equivalent"
        lines = [f"{self.backend}: {self.generated} mutants of this vLLM, {len(self.verdicts)} run: "
                 f"{len(self.killed) + len(self.stale)} killed, {len(self.equivalent)} equivalent, "
                 f"{len(self.survivors)} survived, {len(self.errors)} errors: {rate} (goal {GOAL:.0%})"]
        if self.missing_functions:
            lines.append(f"  functions this vLLM does not define: {', '.join(self.missing_functions)}")
        lines += [f"  survived: {v.describe()}" for v in self.survivors]
        lines += [f"  listed as equivalent but killed by {v.by}: {v.describe()}" for v in self.stale]
        lines += [f"  error: {v.name} {v.describe()}: {v.by}" for v in self.errors]
        return "\n".join(lines)


def score(backend: str, verdicts: list[Verdict]) -> Score:
    return Score(backend, len(backend_mutants(backend)), missing_functions(backend),
                 [v for v in verdicts if v.name.split(":")[1] == backend])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec_decode_ci.mutation", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", nargs="+", choices=mutated_backends(), default=list(mutated_backends()))
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="run N mutants per backend drawn with --seed (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="tier runs at a time (each imports vLLM once)")
    parser.add_argument("--list", action="store_true", help="print the mutants and run nothing")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants (mutant:<backend>:<number>)")
    args = parser.parse_args(argv)
    chosen = tuple(m for b in args.backend for m in sample(backend_mutants(b), args.sample, args.seed)
                   if not args.only or m.name in args.only)
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name}  {mutant.describe()}")
        return 0
    start = time.perf_counter()

    def progress(verdict: Verdict, done: int, total: int) -> None:
        print(f"[{done}/{total}] {verdict.name} {verdict.outcome} {verdict.wall_s:.1f}s {verdict.describe()}"
              f"{f'  by {verdict.by}' if verdict.outcome == 'killed' else ''}", file=sys.stderr, flush=True)

    try:
        verdicts = run_mutants(chosen, args.workers, progress)
    except ControlNotGreen as exc:
        print(f"spec-decode-ci mutation: {exc}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - start
    scores = [score(b, verdicts) for b in args.backend]
    for s in scores:
        print(s.text())
    print(f"{len(verdicts)} mutants in {wall:.0f} s with {args.workers} worker(s) on this machine: "
          f"{60 * len(verdicts) / wall:.1f} mutants per minute")
    return 1 if any(s.survivors or s.stale or s.errors for s in scores) else 0


if __name__ == "__main__":
    sys.exit(main())
