#!/usr/bin/env python3
"""What a harness step's pytest command costs: wall time, GPU memory peak (sampled with nvidia-smi where a GPU
is present), the host memory of its largest process (pytest, an xdist worker, a self-check's child run: what
decides whether ``-n`` runs fit the machine) and the run's outcome, once per pytest-xdist setting, so that with and without ``-n`` can be compared.

    python bench/tier_cost.py                                   # the per-change step's tier, serial and -n auto
    python bench/tier_cost.py --workers 0 2 4 --markers selfcheck
    python bench/tier_cost.py --workers 0 2 --whole-suite       # README's test command (from the checkout)
    python bench/tier_cost.py --per-regression                  # what each self-check regression costs
    python bench/tier_cost.py --first-red old_guard --workers 4  # a bad commit: seconds until the step is red
    python bench/tier_cost.py --workers 4 --per-file             # and the seconds of each test file's tests
    python bench/tier_cost.py --mutants --workers 2              # every operator mutant: mutants per minute

Run it from outside the checkout for ``--pyargs`` to use the installed suites, as the CI step does.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PER_CHANGE_SUITE = "build_path"  # the hardware matrix's suite the per-change step runs


def step_markers() -> str:
    """The per-change step's pytest markers, as the hardware matrix the installed package carries gives them."""
    from spec_decode_ci.capabilities import PACKAGED_MATRIX
    from spec_decode_ci.generator.model import load_matrix

    return load_matrix(PACKAGED_MATRIX).suites[PER_CHANGE_SUITE].markers


class GpuMemoryPeak(threading.Thread):
    """The most GPU memory in use on any GPU while it runs, sampled every ``interval`` seconds (MiB)."""

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval, self.peak, self.running = interval, None, True
        self.available = shutil.which("nvidia-smi") is not None

    def run(self) -> None:
        while self.available and self.running:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout
            used = [int(v) for v in re.findall(r"\d+", out)]
            if used:
                self.peak = max(self.peak or 0, *used)
            time.sleep(self.interval)


# Runs a command and then prints the largest resident set of any process below it that has ended (KiB).
LARGEST_PROCESS = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
                   "print('largest-process-kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
                   "file=sys.stderr); sys.exit(code)")


def measure(command: list[str], log: Path | None = None) -> tuple[float, int | None, int | None, int, str, str]:
    """Wall seconds, GPU MiB peak, the largest process's host MiB, exit code, pytest's summary line and its
    output."""
    sampler = GpuMemoryPeak()
    sampler.start()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", LARGEST_PROCESS, *command], capture_output=True, text=True)
    wall = time.perf_counter() - start
    sampler.running = False
    sampler.join()
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    largest = re.search(r"largest-process-kib (\d+)", proc.stderr)
    tail = [line for line in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return (wall, sampler.peak, int(largest.group(1)) // 1024 if largest else None, proc.returncode,
            tail[-1] if tail else proc.stdout[-300:], proc.stdout)


DURATION_LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+?)::", re.M)  # pytest --durations


def seconds_per_file(output: str) -> list[tuple[str, float]]:
    """The seconds of setup, call and teardown that pytest's ``--durations`` lines give, summed per test file
    (the worker-seconds under xdist), the costliest first."""
    per_file: dict[str, float] = {}
    for seconds, path in DURATION_LINE.findall(output):
        per_file[path] = per_file.get(path, 0.0) + float(seconds)
    return sorted(per_file.items(), key=lambda item: -item[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", nargs="+", default=["0", "auto"], help="pytest-xdist -n values (0: no xdist)")
    parser.add_argument("--markers", help="pytest -m (default: the per-change step's, from the matrix)")
    parser.add_argument("--whole-suite", action="store_true", help="README's test command instead of the step's")
    parser.add_argument("--log-dir", type=Path, help="keep each run's output there (n<workers>.log)")
    parser.add_argument("--per-regression", action="store_true",
                        help="the self-check's cost per regression: its forked tier run's seconds and peak memory")
    parser.add_argument("--first-red", metavar="REGRESSION",
                        help="the step's tests with REGRESSION's copy standing in for a bad commit, stopping at the "
                             "first red test (-x): the seconds until the step is red")
    parser.add_argument("--per-file", action="store_true",
                        help="after each run, its tests' seconds (0.05 s and more) summed per test file")
    parser.add_argument("--mutants", action="store_true",
                        help="the mutation run (python -m spec_decode_ci.mutation) with each --workers value: its "
                             "wall time and mutants per minute")
    parser.add_argument("--sample", type=int, help="with --mutants: N mutants per backend instead of all")
    args = parser.parse_args()
    if args.mutants:
        return mutation_cost(args.workers, args.sample)
    args.markers = args.markers or step_markers()
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)  # before the runs, not after the first one's minutes
    if args.per_regression:
        return per_regression()
    print(f"{'-n':>6}  {'wall s':>8}  {'GPU MiB peak':>12}  {'host MiB, largest process':>25}  exit  outcome",
          flush=True)
    for workers in args.workers:
        command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider"]
        if not args.whole_suite:
            command += ["-p", "spec_decode_ci.pytest_plugin", "-m", args.markers, "--pyargs", "spec_decode_ci.suites"]
        if workers != "0":
            command += ["-n", workers]
        if args.first_red:
            command = [*command, "--regression", args.first_red, "-x"]
        if args.per_file:
            command += ["--durations=0", "--durations-min=0.05"]
        wall, peak, host, code, outcome, output = measure(command, args.log_dir / f"n{workers}.log" if args.log_dir else None)
        print(f"{workers:>6}  {wall:8.1f}  {peak if peak is not None else 'n/a':>12}  "
              f"{host if host is not None else 'n/a':>25}  {code:>4}  {outcome}", flush=True)
        if args.per_file:
            files = seconds_per_file(output)
            print(f"{'':8}worker-seconds per file ({sum(s for _, s in files):.1f} s in all):", flush=True)
            for path, seconds in files:
                print(f"{'':8}{seconds:8.1f}  {path}", flush=True)
    return 0


def mutation_cost(workers: list[str], sample: int | None) -> int:
    """The mutation run's wall time per worker count (its control included), and mutants per minute."""
    print(f"{'workers':>7}  {'mutants':>7}  {'wall s':>8}  {'per minute':>10}  {'host MiB, largest process':>25}  exit",
          flush=True)
    for count in workers:
        n = "1" if count in ("0", "auto") else count
        command = [sys.executable, "-m", "spec_decode_ci.mutation", "--workers", n,
                   *(["--sample", str(sample)] if sample else [])]
        wall, _, host, code, _, output = measure(command)
        ran = sum(int(m) for m in re.findall(r"^\S+: \d+ mutants of this vLLM, (\d+) run", output, re.M))
        print(f"{n:>7}  {ran:>7}  {wall:8.1f}  {60 * ran / wall:10.1f}  "
              f"{host if host is not None else 'n/a':>25}  {code:>4}", flush=True)
    return 0


def per_regression() -> int:
    """One forked tier run per regression of the self-check (as tests/spec_decode/test_selfcheck.py runs them):
    seconds, the run's peak host memory and its verdict; the server's import once, and the control."""
    from spec_decode_ci import model_info
    from spec_decode_ci.pytest_run import TIER_PRELOAD, regression_args
    from spec_decode_ci.patches import REGRESSIONS
    from spec_decode_ci.pytest_run import ForkedPytest

    start = time.perf_counter()
    warm_up = model_info.start()  # once for every run, as a test session's plugin starts it
    runs = ForkedPytest(preload=TIER_PRELOAD)
    runs.run("spec_decode_ci.suites", marker="no_such_marker")  # returns once the server has imported vLLM
    print(f"server import (once per process): {time.perf_counter() - start:.1f} s", flush=True)
    if runs.left_to_runs:
        print(f"imported by each run (their import initialises CUDA): {', '.join(runs.left_to_runs)}", flush=True)
    print(f"{'regression':44s} {'wall s':>7s} {'peak MiB':>9s}  red / must turn red", flush=True)
    total = 0.0
    for name, regression in sorted(REGRESSIONS.items(), key=lambda r: r[0] != "none"):
        why_not = (None if regression.present(importlib.import_module(regression.module))
                   else "this vLLM lacks the code it undoes") or regression.unobservable_here()
        if why_not:  # the self-check skips it too
            print(f"{name:44s} {'-':>7s} {'-':>9s}  skipped: {why_not[:90]}", flush=True)
            continue
        run = runs.run(*regression.suites, marker="build_path", extra=regression_args(name), only=regression.must_fail)
        total += run.wall_s
        caught = len(set(regression.must_fail) & run.red)
        peak = run.max_rss_mib if run.max_rss_mib is not None else "n/a"  # a child of its own: not measured
        print(f"{name:44s} {run.wall_s:7.1f} {peak:>9}  "
              f"{caught} / {len(regression.must_fail)}{'  (control, whole tier: exit ' + str(run.returncode) + ')' if name == 'none' else ''}",
              flush=True)
    runs.close()
    if warm_up is not None:
        warm_up.stop()
    print(f"all {len(REGRESSIONS)} runs: {total:.1f} s, one process at a time", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
