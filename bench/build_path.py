#!/usr/bin/env python3
"""Build-path tier numbers on this machine (goals from the project: tier <= 60 s including the vLLM import;
>= 2,000 random batches within <= 30 s).

Prints: wall time of the tier's pytest run; random batches through the real build() per second; host syncs
per build() by batch class (sentinel); CPU time of one build() for a few batch shapes; the same for each MLA
builder on vLLM's SM100 list that runs here.
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


def median_build_ms(harness, batch, repeats: int = 50) -> float:
    """CPU milliseconds of one ``build()`` of ``batch``, the median of ``repeats``."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        harness.build(batch)
        times.append(time.process_time() - start)
    return statistics.median(times) * 1e3


def tier_wall_time() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "build_path",
                    "tests/spec_decode"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    t0 = time.perf_counter()
    from spec_decode_ci.buildpath.batches import Choices, random_spec_decode_batch, spec_decode_batch
    from spec_decode_ci.flashinfer.harness import BuildHarness
    from spec_decode_ci.emulation import BLACKWELL

    harness = BuildHarness()
    print(f"vLLM import + real builder construction: {time.perf_counter() - t0:6.1f} s")

    choose = Choices(random.Random(0))
    options = harness.options
    batches = [random_spec_decode_batch(choose, options.page_size, options.num_spec_tokens, options.max_model_len)
               for _ in range(2000)]
    start = time.perf_counter()
    for b in batches:
        harness.build(b)
    elapsed = time.perf_counter() - start
    print(f"random batches through build(): {len(batches)} in {elapsed:5.1f} s ({len(batches) / elapsed:6.0f}/s)")

    print("host syncs per build() (sentinel), by batch class:")
    k = harness.options.num_spec_tokens
    for label, gpu in [("all TRTLLM", BLACKWELL), ("native prefill", BLACKWELL.variant(trtllm_prefill=False)),
                       ("all native", BLACKWELL.variant(trtllm_prefill=False, trtllm_decode=False))]:
        h = BuildHarness(gpu=gpu)
        for mix, (d, p) in {"decode-only": (4, 0), "prefill-only": (0, 4), "mixed": (4, 4)}.items():
            result = h.build(spec_decode_batch(d, p, k, 16, seed=1, decode_query_len=h.decode_threshold),
                             watch_syncs=True)
            print(f"  {label:15s} {mix:13s} {len(result.syncs)}")

    print("CPU time of one build() (median of 50):")
    for d, p in [(1, 0), (8, 8), (32, 32), (0, 64)]:
        ms = median_build_ms(harness, spec_decode_batch(d, p, k, 16, seed=2))
        print(f"  {d:2d} decodes + {p:2d} prefills: {ms:6.2f} ms")

    mla_numbers()

    if os.environ.get("SKIP_TIER_RUN") != "1":
        print(f"build-path tier (pytest -m build_path, fresh process): {tier_wall_time():6.1f} s")


def mla_numbers() -> None:
    from spec_decode_ci.buildpath.batches import Choices, random_spec_decode_batch, spec_decode_batch
    from spec_decode_ci.mla.builder import MlaOptions, sm100_dense_backends
    from spec_decode_ci.mla.harness import MlaBuildHarness

    print("MLA builders (emulated SM100): random batches/s, host syncs decode-only/prefill-only/mixed, "
          "CPU ms of one 8+8 build()")
    for name, why in sm100_dense_backends():
        if why:
            print(f"  {name:15s} not run here: {why}")
            continue
        h = MlaBuildHarness(MlaOptions(backend=name))
        choose = Choices(random.Random(0))
        batches = [random_spec_decode_batch(choose, h.page_size, h.options.num_spec_tokens, h.options.max_model_len)
                   for _ in range(500)]
        start = time.perf_counter()
        for b in batches:
            h.build(b)
        rate = len(batches) / (time.perf_counter() - start)
        syncs = [len(h.build(spec_decode_batch(d, p, h.options.num_spec_tokens, h.page_size, seed=1,
                                               decode_query_len=min(4, h.decode_threshold)), watch_syncs=True).syncs)
                 for d, p in [(4, 0), (0, 4), (4, 4)]]
        ms = median_build_ms(h, spec_decode_batch(8, 8, h.options.num_spec_tokens, h.page_size, seed=2,
                                                  decode_query_len=min(4, h.decode_threshold)))
        print(f"  {name:15s} {rate:6.0f}/s  syncs {syncs}  {ms:6.2f} ms")


if __name__ == "__main__":
    main()
