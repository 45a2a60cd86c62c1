"""Speed as a user meets it: one case's speculative engine and its target alone, each started as vLLM runs by
default (its own engine-core process, CUDA graphs and torch.compile as the case says, the case's async
scheduling), warmed up, then timed on the case's prompts without any of the harness's instrumentation.

Per engine: output tokens per second over each timed ``generate`` (wall clock, every prompt at once), the mean time
per output token of a request (vLLM's own ``vllm:request_time_per_output_token_seconds`` histogram over the timed
runs), and the share of the timed runs the GPU sat idle (NVML's utilization, sampled from this process: the share
of each sample period no kernel ran, i.e. the GPU waiting on the host). The speedup is the speculative engine's
median tokens/s over the target's.

Run as a child, told everything on its command line (``command`` builds it), so a failure prints a command anyone
can rerun::

    python -m spec_decode_ci.e2e.speed --config cases.h200_smoke.yaml --suite eagle --case tiny-llama-eagle3 \\
        --tiny-models DIR --output speed.json [--runner V2] [--repeats 5] [--warmup 1] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.cases import Case, SuiteConfig

REPEATS = 5  # timed generate() calls per engine
WARMUP = 1  # untimed generate() calls first: CUDA graphs, allocator and caches settled
MAX_TOKENS = 128  # output tokens per prompt: long enough that decoding, not prefill, dominates
TPOT_METRICS = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
NVML_PERIOD_S = 0.02  # how often the GPU's utilization is read while the engine generates


@dataclass
class EngineSpeed:
    """One engine's timed runs."""

    tokens_per_s: list[float]  # output tokens per second of each timed generate()
    output_tokens: int  # per timed generate()
    tpot_ms: float | None  # vLLM's mean time per output token of a request over the timed runs; None: not reported
    gpu_idle_share: float | None  # 1 - NVML's mean utilization over the timed runs; None: NVML not readable
    start_s: float  # LLM() until it returned

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_s)

    def figure(self) -> dict[str, Any]:
        return {"tokens_per_s": round(self.median, 1), "min": round(min(self.tokens_per_s), 1),
                "max": round(max(self.tokens_per_s), 1), "runs": len(self.tokens_per_s),
                "output_tokens": self.output_tokens,
                "tpot_ms": None if self.tpot_ms is None else round(self.tpot_ms, 3),
                "gpu_idle_share": None if self.gpu_idle_share is None else round(self.gpu_idle_share, 3),
                "start_s": round(self.start_s, 1)}


@dataclass
class SpeedResult:
    """Both engines of a case on the same prompts, and the command that measured them."""

    speculative: EngineSpeed
    target: EngineSpeed
    command: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.speculative.median / self.target.median

    def figure(self, floor: float | None) -> dict[str, Any]:
        return {"speedup": round(self.speedup, 3), "speculative": self.speculative.figure(),
                "target": self.target.figure(), "floor": floor, "command": shlex.join(self.command)}


# --- the parent's side ---------------------------------------------------------------------------------------------

def tiny_model_root(config: SuiteConfig, case: Case) -> Path | None:
    """Where the configuration's tiny models were written for ``case`` (its target is one of them), else None."""
    target = cases.hand_built_target(config, case)
    return None if target is None else Path(target).parent


def command(config_path: Path, config: SuiteConfig, case: Case, output: Path, runner: str | None,
            repeats: int = REPEATS, warmup: int = WARMUP, max_tokens: int = MAX_TOKENS) -> list[str]:
    """The child's command line that measures ``case`` (of ``config``, read from ``config_path``)."""
    argv = [sys.executable, "-m", "spec_decode_ci.e2e.speed", "--config", str(config_path), "--suite", case.suite,
            "--case", case.id, "--output", str(output), "--repeats", str(repeats), "--warmup", str(warmup),
            "--max-tokens", str(max_tokens)]
    root = tiny_model_root(config, case)
    if root is not None:
        argv += ["--tiny-models", str(root)]
    if runner is not None:
        argv += ["--runner", runner]
    return argv


CHILD_TIMEOUT_S = 420  # two engines started (their compiled graphs cached by the case's own runs), warmed up, timed


class SpeedRunFailed(RuntimeError):
    """The child that measures speed did not finish: its command and the end of its output."""


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def measure(config: SuiteConfig, case: Case, workdir: Path, runner: str | None) -> SpeedResult:
    """``case`` measured by a child process (``command``), its figures read back."""
    output = workdir / f"speed-{case.suite}-{case.id}.json"
    argv = command(cases.config_path(), config, case, output, runner)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as late:
        said = "\n".join(_text(late.stdout).splitlines()[-10:] + _text(late.stderr).splitlines()[-10:])
        raise SpeedRunFailed(f"the speed run of {case.id} took over {CHILD_TIMEOUT_S} s; rerun: {shlex.join(argv)}\n"
                             f"{said}") from None
    if done.returncode != 0 or not output.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise SpeedRunFailed(f"the speed run of {case.id} exited {done.returncode}; rerun: {shlex.join(argv)}\n{tail}")
    data = json.loads(output.read_text())
    return SpeedResult(EngineSpeed(**data["speculative"]), EngineSpeed(**data["target"]), argv)


# --- the child's side ----------------------------------------------------------------------------------------------

def _pynvml():
    """NVML's Python bindings: the ``pynvml`` package (nvidia-ml-py), else the copy vLLM ships."""
    try:
        import pynvml
    except ImportError:
        from vllm.third_party import pynvml
    return pynvml


class GpuBusy:
    """NVML's utilization of the visible GPU, read every ``NVML_PERIOD_S`` while inside ``sampling()``."""

    def __init__(self):
        self.samples: list[int] = []
        self._handle = None
        self._stop = threading.Event()
        try:
            pynvml = _pynvml()
            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
            self._read = lambda: pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        except Exception as exc:  # no NVML (no NVIDIA driver, pynvml missing): the figure is left out
            self.unavailable = f"{type(exc).__name__}: {exc}"
        else:
            self.unavailable = None

    def _loop(self) -> None:
        while not self._stop.wait(NVML_PERIOD_S):
            self.samples.append(self._read())

    def start(self) -> None:
        if self._handle is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._handle is not None:
            self._stop.set()
            self._thread.join()

    @property
    def idle_share(self) -> float | None:
        return 1 - statistics.fmean(self.samples) / 100 if self.samples else None


def histogram_totals(metrics, names=TPOT_METRICS) -> tuple[float, int] | None:
    """(sum, count) of the first of ``names`` that vLLM reports among ``metrics`` (``LLM.get_metrics()``), summed
    over engines; None where it reports none of them."""
    for name in names:
        found = [m for m in metrics if m.name == name and hasattr(m, "sum") and hasattr(m, "count")]
        if found:
            return sum(m.sum for m in found), sum(m.count for m in found)
    return None


def mean_between(before: tuple[float, int] | None, after: tuple[float, int] | None) -> float | None:
    """The mean of the observations a histogram gained between two readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _progress(label: str, what: str) -> None:
    print(f"{label}: {what}", flush=True)  # where a child that ran out of time stopped


def measure_engine(kwargs: dict[str, Any], inputs: list, max_tokens: int, repeats: int, warmup: int,
                   label: str = "engine") -> EngineSpeed:
    """Start one engine with ``kwargs``, warm it up, time ``repeats`` generate() calls, shut it down."""
    from vllm import LLM, SamplingParams

    _progress(label, "starting")
    start = time.perf_counter()
    # Statistics on, as `vllm serve` keeps them by default: the time per output token is vLLM's own figure.
    llm = LLM(**kwargs, disable_log_stats=False)
    started = time.perf_counter() - start
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                            detokenize=not kwargs.get("skip_tokenizer_init"))
    _progress(label, f"started in {started:.1f} s")
    for _ in range(warmup):
        llm.generate(inputs, params, use_tqdm=False)
    _progress(label, "warmed up")
    busy = GpuBusy()
    before = histogram_totals(llm.get_metrics())
    rates, tokens = [], 0
    busy.start()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            outputs = llm.generate(inputs, params, use_tqdm=False)
            wall = time.perf_counter() - t0
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
            rates.append(tokens / wall)
    finally:
        busy.stop()
    tpot = mean_between(before, histogram_totals(llm.get_metrics()))
    shutdown = getattr(getattr(llm.llm_engine, "engine_core", None), "shutdown", None)
    if shutdown is not None:
        shutdown()
    del llm
    return EngineSpeed(rates, tokens, None if tpot is None else tpot * 1000, busy.idle_share, started)


def with_tiny_models(config: SuiteConfig, root: Path) -> SuiteConfig:
    """``config`` with its tiny models' names replaced by their directories under ``root``, written there first
    where one is missing (they are made the same each time), so that a printed command reruns on its own."""
    names = [*config.tiny_models, *(name for heads in config.tiny_heads.values() for name in heads)]
    if not all((root / name / "config.json").exists() for name in names):
        from spec_decode_ci.e2e.tiny_models import write_tiny_models

        write_tiny_models(root, config.tiny_models, config.tiny_heads, weights=True)
    return config.with_models({name: str(root / name) for name in names})


def _case(config: SuiteConfig, suite: str, case_id: str) -> Case:
    found = [c for c in config.cases(suite) if c.id == case_id]
    if not found:
        raise SystemExit(f"speed: no case {case_id!r} in suite {suite!r} (cases: "
                         f"{', '.join(c.id for c in config.cases(suite)) or 'none'})")
    return found[0]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spec_decode_ci.e2e.speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the e2e cases file (a path, or one shipped beside cases.yaml)")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--tiny-models", type=Path, help="where the configuration's tiny models were written")
    parser.add_argument("--runner", choices=("V1", "V2"), help="vLLM's model runner (unset: vLLM's choice)")
    parser.add_argument("--output", type=Path, required=True, help="the JSON written here")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    return parser


def case_of(args: argparse.Namespace) -> tuple[SuiteConfig, Case]:
    """The configuration (its tiny models at their directories) and the case the command line names."""
    config = cases.load(args.config)
    if args.tiny_models is not None:
        config = with_tiny_models(config, args.tiny_models)
    return config, _case(config, args.suite, args.case)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from spec_decode_ci.e2e.engine_run import prompts
    from spec_decode_ci.e2e.model_runner_choice import VLLM_RUNNER_ENV

    config, case = case_of(args)
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # vLLM's default: the engine core in its own process
    if args.runner:
        os.environ[VLLM_RUNNER_ENV] = "1" if args.runner == "V2" else "0"
    inputs = prompts(config)
    measured = {}
    for role, speculative in (("target", False), ("speculative", True)):
        kwargs = cases.engine_kwargs(config, case, speculative)
        measured[role] = asdict(measure_engine(kwargs, inputs, args.max_tokens, args.repeats, args.warmup,
                                               f"{case.id} {role}"))
        rates = measured[role]["tokens_per_s"]
        print(f"{case.id} {role}: N={len(rates)} tokens/s min {min(rates):.1f} median {statistics.median(rates):.1f} "
              f"max {max(rates):.1f}; TPOT {measured[role]['tpot_ms']} ms; GPU idle {measured[role]['gpu_idle_share']}",
              flush=True)
    partial = args.output.with_name(args.output.name + ".partial")
    partial.write_text(json.dumps(measured, indent=1) + "\n")
    os.replace(partial, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
