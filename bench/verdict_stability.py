#!/usr/bin/env python3
"""Whether the whole suite gives the same verdicts run after run and under every pytest-xdist setting: README's
test command once per ``-n`` value given (a value repeated: back-to-back runs), each test's outcome read from
its JUnit XML; prints each run's wall time and counts, then every test whose outcome differs between runs.
Exits non-zero where one does.

    python bench/verdict_stability.py auto auto auto 0 2      # from the checkout
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome (passed, failed, error, skipped) by its JUnit class and name."""
    result = {}
    for case in ET.parse(junit).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        result[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workers", nargs="+", help="pytest-xdist -n per run (0: without xdist)")
    args = parser.parse_args()
    runs: list[tuple[str, dict[str, str]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, workers in enumerate(args.workers):
            junit = Path(tmp) / f"run{i}.xml"
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                       *(["-n", workers] if workers != "0" else [])]
            start = time.perf_counter()
            code = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
            wall = time.perf_counter() - start
            seen = outcomes(junit) if junit.exists() else {}
            runs.append((f"run {i} (-n {workers})", seen))
            counts = ", ".join(f"{n} {k}" for k, n in sorted(Counter(seen.values()).items()))
            print(f"run {i}: -n {workers:>4}  exit {code}  {wall:7.1f} s  {counts}", flush=True)
    tests = sorted(set().union(*(seen for _, seen in runs)))
    differing = [t for t in tests if len({seen.get(t, "absent") for _, seen in runs}) > 1]
    for test in differing:
        print(f"  differs: {test}: " + ", ".join(f"{label} {seen.get(test, 'absent')}" for label, seen in runs))
    print(f"{len(tests)} tests, {len(differing)} with differing verdicts over {len(runs)} runs")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
