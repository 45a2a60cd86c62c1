#!/usr/bin/env python3
"""GPU self-check of the e2e suites: for each deliberate break of vLLM (spec_decode_ci/e2e/gpu_breaks.py), run
the suite it targets on the GPU smoke's tiny models and require the break's tests to be red; with --control,
run each suite unbroken too and require it green. Prints one row per run; exits non-zero if a break went
unnoticed or a control run was red.

    SPEC_DECODE_E2E_CONFIG=cases.h200_smoke.yaml python scripts/gpu_selfcheck.py [--control] [BREAK ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spec_decode_ci import capabilities
from spec_decode_ci.e2e import cases
from spec_decode_ci.pytest_run import run_pytest
from spec_decode_ci.e2e.gpu_breaks import BREAKS, ENV, engine_runner, not_run_here, patched_source, smoke_with_tiny_configs


def run_suite(suites: tuple[str, ...], brk: str | None) -> tuple[int, set[str], float, str]:
    env = {ENV: brk or "", "SPEC_DECODE_E2E_CONFIG": os.environ.get("SPEC_DECODE_E2E_CONFIG", "cases.h200_smoke.yaml")}
    run = run_pytest(*suites, marker="e2e", plugins=("spec_decode_ci.e2e.gpu_breaks",), env=env)
    return run.returncode, run.red, run.wall_s, run.tail(2500)


def short(suites: tuple[str, ...]) -> str:
    return ",".join(s.rsplit(".", 1)[1] for s in suites)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("breaks", nargs="*", help=f"breaks to run (default: all of {', '.join(BREAKS)})")
    parser.add_argument("--control", action="store_true", help="also run each suite without a break")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once on the GPU (each engine takes the smoke's gpu_memory_utilization)")
    args = parser.parse_args()
    unknown = [n for n in args.breaks if n not in BREAKS]
    if unknown:
        parser.error(f"unknown break(s) {unknown}; expected some of {sorted(BREAKS)}")
    names = args.breaks or list(BREAKS)
    config = cases.load()
    share = config.engine.gpu_memory_utilization  # each run's engines take this share of the GPU at once
    if args.jobs < 1 or args.jobs * share > 0.95:
        parser.error(f"--jobs {args.jobs}: each run's engine takes {share} of the GPU's memory "
                     f"(gpu_memory_utilization); at most {max(1, int(0.95 / share))} runs fit at once")
    missing = capabilities.missing(config.engine.requires)
    if missing:
        print(f"gpu_selfcheck: the suites cannot run here: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as root:  # which runner each suite's engines run, from vLLM's config
        smoke = smoke_with_tiny_configs(Path(root))
        runners = {suite: engine_runner(smoke, smoke.cases(suite)[0]) for suite in smoke.suites}
    print("model runner per suite:", {suite: runner.rsplit(".", 1)[-1] for suite, runner in runners.items()})
    ok = True
    print(f"{'break':32s} {'suite':24s} {'verdict':8s} {'wall':>6s}  red tests")
    for name in list(names):
        brk = BREAKS[name]
        reason = not_run_here(brk, runners)
        if reason:
            names.remove(name)
            print(f"{name:32s} {short(brk.suites):24s} {'skipped':8s} {'':6s}  {reason}")
        else:
            patched_source(brk)  # a break that no longer applies fails here, before any GPU time
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # controls and breaks share the --jobs slots
        suites_run = dict.fromkeys(BREAKS[n].suites for n in names) if args.control else {}
        controls = {suites: pool.submit(run_suite, suites, None) for suites in suites_run}
        runs = {name: pool.submit(run_suite, BREAKS[name].suites, name) for name in names}
        for suites, control in controls.items():
            code, failed, wall, tail = control.result()
            green = code == 0 and not failed
            ok &= green
            print(f"{'(none: control)':32s} {short(suites):24s} {'green' if green else 'RED':8s} {wall:6.0f}  "
                  f"{sorted(failed)}")
            if not green:
                print(tail)
        for name in names:
            brk = BREAKS[name]
            code, failed, wall, tail = runs[name].result()
            missing = [t for t in brk.must_fail if t not in failed]
            caught = code != 0 and not missing
            ok &= caught
            print(f"{name:32s} {short(brk.suites):24s} {'red' if caught else 'MISSED':8s} {wall:6.0f}  "
                  f"{sorted(failed)}")
            if not caught:
                print(f"  expected red: {list(brk.must_fail)}\n{tail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
