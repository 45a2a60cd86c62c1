#!/usr/bin/env python3
"""Cold start of `generate-pipeline --check` against a bare `python -c pass` (target: ratio <= 4).

Runs both N times, interleaved, and prints median and minimum wall times and their ratios.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
ROOT = Path(__file__).resolve().parent.parent


def seconds(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    script = Path(sys.executable).parent / "generate-pipeline"  # the installed console script
    commands = {"python -c pass": [sys.executable, "-c", "pass"], "generate-pipeline --check": [str(script), "--check"]}
    samples: dict[str, list[float]] = {name: [] for name in commands}
    # Byte-compile the generator as `pip install` does (PYTHONDONTWRITEBYTECODE would otherwise make every run
    # recompile it), and warm the page cache once.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "generator")], check=True)
    seconds(commands["generate-pipeline --check"])
    for _ in range(RUNS):  # interleaved, so that machine noise hits both alike
        for name, cmd in commands.items():
            samples[name].append(seconds(cmd))
    for name, times in samples.items():
        print(f"{name:28s} median {statistics.median(times) * 1000:7.1f} ms  min {min(times) * 1000:7.1f} ms"
              f"  ({RUNS} runs)")
    bare, check = (samples[name] for name in commands)
    print(f"ratio (median)               {statistics.median(check) / statistics.median(bare):7.2f}  (target <= 4.00)")
    print(f"ratio (min)                  {min(check) / min(bare):7.2f}  (target <= 4.00)")


if __name__ == "__main__":
    main()
