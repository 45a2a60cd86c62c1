#!/usr/bin/env python3
"""Build-path tier numbers on this machine (goals from the project: tier <= 60 s including the vLLM import;
>= 2,000 random batches within <= 30 s).

Prints: wall time of the tier's pytest run; random batches through the real build() per second; host syncs
per build() by batch class (sentinel); CPU time of one build() for a few batch shapes.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the tier's test modules; the harness comes from the install


def tier_wall_time() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "build_path",
                    "tests/spec_decode"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def random_batch(rng: random.Random, page: int, k: int):
    from spec_decode_ci.flashinfer.batches import make_batch

    n = rng.randint(1, 64)
    decodes = rng.randint(0, n)
    q = [1 + k] * decodes + [rng.randint(k + 2, 300) for _ in range(n - decodes)]
    s = [min(4096, max(x, rng.randint(0, 4096 // page - 1) * page + rng.choice([-1, 0, 1, 5]))) for x in q]
    return make_batch(q, s, page, seed=rng.randint(0, 1 << 16))


def main() -> None:
    t0 = time.perf_counter()
    from spec_decode_ci.flashinfer.batches import spec_decode_batch
    from spec_decode_ci.flashinfer.harness import BuildHarness
    from spec_decode_ci.emulation import EmulatedGpu
    from spec_decode_ci.sync import HostSyncSentinel

    harness = BuildHarness()
    print(f"vLLM import + real builder construction: {time.perf_counter() - t0:6.1f} s")

    rng = random.Random(0)
    batches = [random_batch(rng, 16, harness.options.num_spec_tokens) for _ in range(2000)]
    start = time.perf_counter()
    for b in batches:
        harness.build(b)
    elapsed = time.perf_counter() - start
    print(f"random batches through build(): {len(batches)} in {elapsed:5.1f} s ({len(batches) / elapsed:6.0f}/s)")

    print("host syncs per build() (sentinel), by batch class:")
    k = harness.options.num_spec_tokens
    for label, gpu in [("all TRTLLM", EmulatedGpu()), ("native prefill", EmulatedGpu(trtllm_prefill=False)),
                       ("all native", EmulatedGpu(trtllm_prefill=False, trtllm_decode=False))]:
        h = BuildHarness(gpu=gpu)
        for mix, (d, p) in {"decode-only": (4, 0), "prefill-only": (0, 4), "mixed": (4, 4)}.items():
            sentinel = HostSyncSentinel()
            h.build(spec_decode_batch(d, p, k, 16, seed=1, decode_query_len=h.decode_threshold), sentinel)
            print(f"  {label:15s} {mix:13s} {len(sentinel.events)}")

    print("CPU time of one build() (median of 50):")
    for d, p in [(1, 0), (8, 8), (32, 32), (0, 64)]:
        batch = spec_decode_batch(d, p, k, 16, seed=2)
        times = []
        for _ in range(50):
            start = time.process_time()
            harness.build(batch)
            times.append(time.process_time() - start)
        print(f"  {d:2d} decodes + {p:2d} prefills: {statistics.median(times) * 1e3:6.2f} ms")

    if os.environ.get("SKIP_TIER_RUN") != "1":
        print(f"build-path tier (pytest -m build_path, fresh process): {tier_wall_time():6.1f} s")


if __name__ == "__main__":
    main()
