#!/usr/bin/env python3
"""The spread of each case's speed over fresh engines, the figure a case's ``min_speedup`` and the report's
``--speed-tolerance`` are set from. On a GPU, after ``scripts/install_gpu_smoke.sh`` (or with vLLM installed):

    python bench/speed_spread.py --runs 5 eagle:tiny-llama-eagle3 speculators_mtp:tiny-mimo-mtp \\
        draft_model:tiny-llama-self [--config cases.h200_smoke.yaml] [--tiny-models DIR] [--repeats 10]

Each run is the speed check's own child (``python -m spec_decode_ci.e2e.speed``, printed before it runs), so both
engines start afresh each time. Prints, per case, N, min, median and max of the speedup and of each engine's
tokens/s over the runs, the largest fall of one run below the median (what a tolerance must allow), and the floor
that leaves that fall twice over under the smallest run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def spread(values: list[float]) -> str:
    return (f"N={len(values)} min {min(values):.3f} median {statistics.median(values):.3f} "
            f"max {max(values):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", metavar="SUITE:CASE")
    parser.add_argument("--runs", type=int, default=5, help="fresh measurements per case")
    parser.add_argument("--config", default="cases.h200_smoke.yaml")
    parser.add_argument("--tiny-models", type=Path, help="where the tiny models are (written there if missing)")
    parser.add_argument("--repeats", type=int, default=10, help="timed generate() calls per engine and run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="speed-spread-"))
    tiny = args.tiny_models or work / "tiny"
    for named in args.cases:
        suite, _, case = named.partition(":")
        speedups, spec, target = [], [], []
        for run in range(args.runs):
            output = work / f"{case}-{run}.json"
            argv = [sys.executable, "-m", "spec_decode_ci.e2e.speed", "--config", args.config, "--suite", suite,
                    "--case", case, "--tiny-models", str(tiny), "--repeats", str(args.repeats), "--output",
                    str(output)]
            print("$", shlex.join(argv), flush=True)
            if subprocess.run(argv).returncode != 0:
                print(f"{case}: run {run} failed (its output above)", flush=True)
                continue
            data = json.loads(output.read_text())
            s, t = (statistics.median(data[role]["tokens_per_s"]) for role in ("speculative", "target"))
            spec.append(s)
            target.append(t)
            speedups.append(s / t)
        if not speedups:
            continue
        median = statistics.median(speedups)
        fall = max(0.0, 1 - min(speedups) / median)
        print(f"{case}: speedup {spread(speedups)}; speculative tokens/s {spread(spec)}; target tokens/s "
              f"{spread(target)}; largest fall below the median {fall:.1%}; a floor of min x (1 - 2 x fall) = "
              f"{min(speedups) * (1 - 2 * fall):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
