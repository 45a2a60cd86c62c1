#!/usr/bin/env python3
"""Where a vLLM engine's start goes on this GPU, with the GPU smoke's settings and tiny models: the first engine
of a process on a fresh machine, then later ones (the e2e suites start one speculative engine per case and one
baseline per target).

Prints, per engine: wall time of ``LLM(...)`` and of its first ``generate``; for ``LLM(...)`` the process's CPU
seconds and disk reads meanwhile (a wall time far above both is waiting: a network timeout, the GPU) and the
functions its stack was sampled in most (``bench/stack_sampler.py``); vLLM's own timing lines (weights,
memory profiling, KV cache, warm-up); and how much each on-disk cache grew (FlashInfer, vLLM, Triton and
Inductor kernels, the CUDA driver's PTX cache); then the import of vLLM. A B200 nightly step pays the first engine's figures once per step,
plus a later engine's per further engine. Needs a GPU; with ``--spec CASE_ID`` the second and third engines
are that smoke case's speculative engine. With ``--process-per-engine`` each engine starts in a process of its
own, one after the other (a later engine then pays vLLM's import and CUDA's initialisation again, but finds
every on-disk cache the earlier ones filled); a crash then ends that engine only, with its exit status printed.

    SPEC_DECODE_E2E_CONFIG=cases.h200_smoke.yaml python bench/engine_start.py [--spec tiny-llama-eagle3]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the suites run the engine in-process too

TIMING = re.compile(r"(took|takes|finished in|Loading weights|Memory profiling|KV cache|warm|compil|graph)",
                    re.IGNORECASE)


class Timings(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if TIMING.search(message):
            self.lines.append(f"{record.created:.1f} {record.name}: {message[:160]}")


def cache_dirs() -> dict[str, Path]:
    """The on-disk caches a first engine may fill: compiled kernels and the driver's JIT-compiled PTX."""
    home = Path.home()
    return {
        "flashinfer": Path(os.environ.get("FLASHINFER_WORKSPACE_BASE", home)) / ".cache" / "flashinfer",
        "vllm": Path(os.environ.get("VLLM_CACHE_ROOT", home / ".cache" / "vllm")),
        "triton": Path(os.environ.get("TRITON_CACHE_DIR", home / ".triton" / "cache")),
        "inductor": Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR",
                                        Path(tempfile.gettempdir()) / f"torchinductor_{os.environ.get('USER', 'root')}")),
        "cuda-ptx": Path(os.environ.get("CUDA_CACHE_PATH", home / ".nv" / "ComputeCache")),
    }


def cache_bytes() -> dict[str, int]:
    return {name: sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else 0
            for name, root in cache_dirs().items()}


ENGINES = [("first engine (target)", False), ("second engine", True), ("third engine", True)]  # True: --spec's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", help="a smoke case id whose speculative engine is started second and third")
    parser.add_argument("--process-per-engine", action="store_true", help="start each engine in its own process")
    parser.add_argument("--only", type=int, help=argparse.SUPPRESS)  # the engine a child process starts
    args = parser.parse_args()
    if args.process_per_engine:
        for index in range(len(ENGINES)):
            child = [sys.executable, "-X", "faulthandler", __file__, "--only", str(index)]
            code = subprocess.run(child + (["--spec", args.spec] if args.spec else [])).returncode
            if code:
                print(f"{ENGINES[index][0]}: process ended with exit status {code}")
        return

    start = time.perf_counter()
    import vllm  # noqa: F401
    from vllm import LLM, SamplingParams

    print(f"import vllm: {time.perf_counter() - start:6.1f} s")
    from spec_decode_ci.e2e import cases
    from spec_decode_ci.e2e.case_runs import resolve
    from spec_decode_ci.e2e.engine_run import _free_gpu_memory, prompts
    from stack_sampler import report, sampled  # beside this script

    from spec_decode_ci import capabilities

    missing = capabilities.missing(cases.load().engine.requires)
    if missing:
        sys.exit(f"engine_start: the engines cannot start here: {missing}")
    config = resolve(cases.load(), Path(tempfile.mkdtemp(prefix="engine-start-")))
    all_cases = [c for suite in config.suites.values() for c in suite]
    if args.spec and args.spec not in {c.id for c in all_cases}:
        sys.exit(f"engine_start: --spec {args.spec!r} is no case of {cases.config_path()}; expected one of "
                 f"{', '.join(c.id for c in all_cases)}")
    case = next((c for c in all_cases if c.id == args.spec), all_cases[0])
    handler = Timings()
    logging.getLogger("vllm").addHandler(handler)
    runs = [(label, spec and bool(args.spec)) for label, spec in ENGINES]
    for index, (label, speculative) in enumerate(runs):
        if args.only is not None and index != args.only:
            continue
        handler.lines.clear()
        cache_before = cache_bytes()
        t0 = time.perf_counter()
        with sampled(every_s=2.0) as samples:
            llm = LLM(**cases.engine_kwargs(config, case, speculative))
        t1 = time.perf_counter()
        llm.generate(prompts(config), SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True,
                                                      detokenize=False), use_tqdm=False)
        t2 = time.perf_counter()
        grown = ", ".join(f"{name} +{(after - cache_before[name]) / 2**20:.1f} MiB"
                          for name, after in cache_bytes().items())
        print(f"{label} ({'speculative ' + case.id if speculative else 'target alone'}): LLM() {t1 - t0:6.1f} s, "
              f"first generate {t2 - t1:6.1f} s; caches: {grown}")
        print(report("    LLM()", samples))
        for line in handler.lines:
            print("   ", line)
        del llm
        _free_gpu_memory()


if __name__ == "__main__":
    main()
