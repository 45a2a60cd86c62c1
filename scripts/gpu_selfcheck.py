#!/usr/bin/env python3
"""GPU self-check of the e2e suites: for each deliberate break of vLLM (spec_decode_ci/e2e/gpu_breaks.py), run
the cases its tests name of the suite it targets on the GPU smoke's tiny models and require those tests to be
red; with --control, run each suite unbroken too and require it green. A break counts as caught only where its tests failed on the
suite's assertions; a test that crashed instead (an engine that could not start) is INCONCLUSIVE. With --jobs N,
N runs go at once, each on a GPU of its own. Prints one row per run; exits non-zero unless every break was
caught and every control was green.

    SPEC_DECODE_E2E_CONFIG=cases.h200_smoke.yaml python scripts/gpu_selfcheck.py [--control] [BREAK ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from spec_decode_ci import capabilities
from spec_decode_ci.e2e import cases
from spec_decode_ci.patches import PatchDoesNotApply
from spec_decode_ci.pytest_run import PytestRun, run_pytest
from spec_decode_ci.e2e.gpu_breaks import (
    BREAKS, break_args, case_selection, engine_runner, gpu_slots, not_run_here, run_on_gpus, patched_source, smoke_with_tiny_configs, verdict,
)


def run_suite(suites: tuple[str, ...], brk: str | None, log_dir: Path | None, gpu: str | None) -> PytestRun:
    env = {"SPEC_DECODE_E2E_CONFIG": os.environ.get("SPEC_DECODE_E2E_CONFIG", "cases.h200_smoke.yaml")}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    selection = case_selection(BREAKS[brk].must_fail) if brk else ()
    run = run_pytest(*suites, marker="e2e", plugins=("spec_decode_ci.e2e.gpu_breaks",), env=env,
                     extra=(*break_args(brk), *selection))
    if log_dir is not None:
        (log_dir / f"{brk or 'control-' + short(suites)}.log").write_text(run.output)
    return run


def short(suites: tuple[str, ...]) -> str:
    return ",".join(s.rsplit(".", 1)[1] for s in suites)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("breaks", nargs="*", help=f"breaks to run (default: all of {', '.join(BREAKS)})")
    parser.add_argument("--control", action="store_true", help="also run each suite without a break")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each on a GPU of its own (vLLM's memory profile fails where another "
                             "process frees memory on its GPU meanwhile)")
    parser.add_argument("--log-dir", type=Path, help="write each run's full pytest output to DIR/<break>.log")
    args = parser.parse_args()
    unknown = [n for n in args.breaks if n not in BREAKS]
    if unknown:
        parser.error(f"unknown break(s) {unknown}; expected some of {sorted(BREAKS)}")
    names = args.breaks or list(BREAKS)
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: expected 1 or more")
    gpus: list[str | None] = [None]  # one run at a time: on the GPUs this process sees
    if args.jobs > 1:
        import torch

        try:
            gpus = list(gpu_slots(args.jobs, dict(os.environ), torch.cuda.device_count()))
        except ValueError as error:
            parser.error(f"--jobs {args.jobs}: {error}")
    config = cases.load()
    missing = capabilities.missing(config.engine.requires)
    if missing:
        print(f"gpu_selfcheck: the suites cannot run here: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as root:  # which runner each suite's engines run, from vLLM's config
        smoke = smoke_with_tiny_configs(Path(root))
        runners = {suite: engine_runner(smoke, smoke.cases(suite)[0]) for suite in smoke.suites}
    print("model runner per suite:", {suite: runner.rsplit(".", 1)[-1] for suite, runner in runners.items()})
    ok = True
    print(f"{'break':32s} {'suite':24s} {'verdict':12s} {'wall':>6s}  red tests")
    for name in list(names):
        brk = BREAKS[name]
        reason = not_run_here(brk, runners)
        if reason:
            names.remove(name)
            print(f"{name:32s} {short(brk.suites):24s} {'skipped':12s} {'':6s}  {reason}")
        else:
            try:
                patched_source(brk)  # a break that does not apply to this vLLM is found here, before any GPU time
            except PatchDoesNotApply as error:  # the harness's to update: said, and the other breaks still run
                names.remove(name)
                ok = False
                print(f"{name:32s} {short(brk.suites):24s} {'NO FORM HERE':12s} {'':6s}  {error}")
    suites_run = list(dict.fromkeys(BREAKS[n].suites for n in names)) if args.control else []
    jobs = [(suites, None) for suites in suites_run] + [(BREAKS[n].suites, n) for n in names]
    results = run_on_gpus(jobs, gpus, lambda job, gpu: run_suite(*job, args.log_dir, gpu))  # controls and breaks
    for (suites, name), run in zip(jobs, results):
        must_fail = BREAKS[name].must_fail if name else None
        outcome = verdict(run, must_fail)
        ok &= outcome in ("green", "red")
        print(f"{name or '(none: control)':32s} {short(suites):24s} {outcome:12s} {run.wall_s:6.0f}  "
              f"{sorted(run.red)}")
        if outcome == "INCONCLUSIVE":
            print("\n".join(f"  {failure}" for failure in run.failures if not failure.by_a_check))
        elif outcome not in ("green", "red"):
            print((f"  expected red: {list(must_fail)}\n" if must_fail else "") + run.tail(2500))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
