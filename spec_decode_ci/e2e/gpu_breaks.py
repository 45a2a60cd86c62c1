"""Deliberate breaks of vLLM for the GPU self-check: each one makes one e2e suite's checks turn red.

A break loads a patched copy of one vLLM module in place of the installed one, in this process only: the source
is read from the installed file, edited once by a regular expression, compiled and registered under the
module's name before vLLM imports it (the installed file is never written). Selected on the command line:
``pytest -p spec_decode_ci.e2e.gpu_breaks --gpu-break <name> ...``; ``scripts/gpu_selfcheck.py`` runs every break
against its suite on the GPU smoke's tiny models and prints each run's command.
"""

from __future__ import annotations

import importlib.util
import queue
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from spec_decode_ci import compat
from spec_decode_ci.compat import module_origin
from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.model_runner_choice import engine_runner
from spec_decode_ci.patches import GPU_BREAKS, Patch, PatchDoesNotApply, apply
from spec_decode_ci.pytest_run import PytestRun

OPTION = "--gpu-break"
T, R = TypeVar("T"), TypeVar("R")
MARKER = "__spec_decode_ci_break__"


BREAKS = GPU_BREAKS  # the breaks' records live in the one registry of vLLM patches, spec_decode_ci.patches


def smoke_with_tiny_configs(root: Path):
    """The GPU smoke's configuration with its tiny models written under ``root`` as configs only (enough for
    vLLM to build each case's engine configuration)."""
    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    smoke = cases.load(str(cases.SMOKE_CONFIG_PATH))
    return smoke.with_models(write_tiny_models(root, smoke.tiny_models, smoke.tiny_heads, weights=False))


def suite_of(brk: Patch) -> str:
    """The e2e suite whose module (``test_<suite>``) a break must turn red."""
    return brk.suites[0].rsplit(".", 1)[1].removeprefix("test_")


def case_selection(must_fail: tuple[str, ...]) -> tuple[str, ...]:
    """pytest arguments that run only the cases ``must_fail`` names (``test[case]``): the other cases' engines
    cannot turn those tests red, so a break's run skips them (none named: every case)."""
    named = sorted({test.partition("[")[2].removesuffix("]") for test in must_fail} - {""})
    return ("-k", " or ".join(named)) if named else ()


def not_run_here(brk: Patch, runners: dict[str, str]) -> str | None:
    """Why ``brk`` cannot show in its suite's engines, which run the model runner ``runners[suite]`` (None: it
    can)."""
    missing = brk.runner_missing()
    if missing:
        return missing
    runner = runners[suite_of(brk)]
    if brk.runner is not None and brk.runner != runner:
        return f"break {brk.name!r} edits {brk.runner}'s code; this vLLM runs the suite's engines on {runner}"
    return None


def verdict(run: PytestRun, must_fail: tuple[str, ...] | None) -> str:
    """A control (``must_fail`` None) is green or RED; a break is red only where each of its tests failed on an
    assertion of the suite, MISSED where one passed. A test that failed by crashing instead (an engine that
    could not start, an error inside vLLM or torch) decides nothing: INCONCLUSIVE."""
    crashed = {f.test for f in run.failures if not f.by_a_check}
    if must_fail is None:
        return "green" if run.returncode == 0 and not run.red else "INCONCLUSIVE" if crashed else "RED"
    if any(t not in run.red for t in must_fail):
        return "MISSED"
    return "red" if all(t in run.red_by_checks for t in must_fail) else "INCONCLUSIVE"


def gpu_slots(jobs: int, environ: dict[str, str], device_count: int) -> list[str]:
    """The GPUs ``jobs`` self-check runs take at once, one each (vLLM fails its memory profile where another
    process frees memory on its GPU meanwhile): CUDA_VISIBLE_DEVICES's entries where it is set, else the
    device indices. ValueError where fewer GPUs are visible than ``jobs``."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [g.strip() for g in visible.split(",") if g.strip()] if visible is not None else [
        str(i) for i in range(device_count)]
    if jobs > len(gpus):
        raise ValueError(f"{jobs} runs at once need a GPU each; {len(gpus)} visible here "
                         f"({'CUDA_VISIBLE_DEVICES=' + repr(visible) if visible is not None else 'torch.cuda'})")
    return gpus[:jobs]


def run_on_gpus(jobs: list[T], gpus: list[str | None], run: Callable[[T, str | None], R]) -> list[R]:
    """``run(job, gpu)`` for every job, in order of ``jobs``; as many at once as there are ``gpus``, never two
    on one GPU (None: the GPUs this process sees, one job at a time)."""
    free: queue.Queue = queue.Queue()
    for gpu in gpus:
        free.put(gpu)

    def on_a_free_gpu(job: T) -> R:
        gpu = free.get()
        try:
            return run(job, gpu)
        finally:
            free.put(gpu)

    with ThreadPoolExecutor(max_workers=len(gpus)) as pool:
        return list(pool.map(on_a_free_gpu, jobs))


def patched_source(brk: Patch) -> tuple[str, str, str]:
    """(the module edited, its installed file, its source with the break applied): the first of the break's
    homes whose installed source has the code it edits."""
    refused = None
    for module in brk.homes:
        origin = module_origin(module)
        if origin is None:
            continue
        try:
            return module, origin, apply(brk, open(origin).read(), origin)
        except PatchDoesNotApply as error:
            refused = refused or error
    if refused is not None:
        raise refused
    parent, _, child = brk.module.rpartition(".")
    raise PatchDoesNotApply(parent, child, f"break {brk.name!r}", brk.last_found,
                            detail=f"break {brk.name!r}: vLLM has no module {' or '.join(brk.homes)}")


def install(name: str) -> None:
    """Registers the patched copy of the break's module; it must not have been imported yet."""
    brk = BREAKS[name]
    module_name, origin, patched = patched_source(brk)
    if module_name in sys.modules:
        raise RuntimeError(f"break {name!r}: {module_name} is already imported; load this plugin first")
    spec = importlib.util.find_spec(module_name)
    module = importlib.util.module_from_spec(spec)
    setattr(module, MARKER, name)
    sys.modules[module_name] = module
    try:
        exec(compile(patched, origin, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[module_name]
        raise
    parent, _, child = module_name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)


def break_args(name: str | None) -> tuple[str, ...]:
    """The pytest arguments that install break ``name`` (none for a control run)."""
    return (OPTION, name) if name else ()


def pytest_addoption(parser) -> None:
    parser.addoption(OPTION, metavar="NAME", default=None,
                     help=f"install this deliberate break of vLLM before the run imports it (one of {', '.join(BREAKS)})")


def pytest_configure(config) -> None:
    import pytest

    name = config.getoption(OPTION)
    if name:
        if name not in BREAKS:
            raise pytest.UsageError(f"{OPTION} {name!r}: expected one of {', '.join(sorted(BREAKS))}")
        install(name)
