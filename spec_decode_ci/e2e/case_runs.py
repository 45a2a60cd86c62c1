"""Whether a case can run here and its engine runs, run once each: the machine's capabilities, the weights it
can load, the runner vLLM serves it on (skips with the reason), the tiny models written for it, and the run cache
the checks read."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from spec_decode_ci.e2e.cases import Case, SuiteConfig, engine_kwargs
from spec_decode_ci.e2e.engine_run import Run, run_case
from spec_decode_ci.e2e.model_runner_choice import asked_runner, not_served
from spec_decode_ci.e2e.speed import SpeedResult, measure


def missing_weights(case: Case) -> str | None:
    """Why the case's checkpoints cannot be loaded here: not in the local HF cache and no hub to fetch from."""
    from huggingface_hub import constants, try_to_load_from_cache

    missing = [repo for repo in case.checkpoints
               if os.path.isdir(repo) is False and not isinstance(try_to_load_from_cache(repo, "config.json"), str)]
    if not missing:
        return None
    if constants.HF_HUB_OFFLINE:
        return f"weights not in the local cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set: {missing}"
    try:
        from huggingface_hub import HfApi

        for repo in missing:
            HfApi().model_info(repo, timeout=10)
    except Exception as exc:  # no network, no access (gated model without a token), no such repo
        return f"weights of {missing} not cached under {constants.HF_HUB_CACHE} and not reachable: " \
               f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None


def missing_prompts(case: Case) -> str | None:
    """Why the case's prompts cannot be made here: vLLM's benchmark datasets (MT-Bench) need ``datasets``."""
    import importlib.util

    if case.prompt_set == "mt_bench" and importlib.util.find_spec("datasets") is None:
        return "vLLM's acceptance-length prompts (MT-Bench) are read by vLLM's benchmark loader, which needs the " \
               "`datasets` package (vllm[bench]); it is not installed"
    return None


def resolve(config: SuiteConfig, tiny_model_root: Path) -> SuiteConfig:
    """The configuration as this machine runs it: tiny models written under ``tiny_model_root`` (hand-built
    stand-ins, named in the config instead of hub ids) where the machine can run the cases; else unchanged."""
    from spec_decode_ci import capabilities

    if not config.tiny_models or capabilities.missing(config.engine.requires):
        return config
    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    return config.with_models(write_tiny_models(tiny_model_root, config.tiny_models, config.tiny_heads,
                                                weights=True))


class CaseRuns:
    """The engine runs of the cases of a resolved configuration: one per distinct set of engine arguments, so
    cases with the same target share its baseline (the target alone), and each speculative engine runs once."""

    def __init__(self, config: SuiteConfig):
        from spec_decode_ci import capabilities

        reason = capabilities.missing(config.engine.requires)
        if reason:
            pytest.skip(reason)
        self.config = config
        self._runs: dict[str, Run] = {}
        self._failed: dict[str, str] = {}  # engine arguments -> why that engine's run broke (not retried)
        self._speeds: dict[str, SpeedResult] = {}

    def _skip_unless_runnable(self, case: Case) -> None:
        reason = missing_weights(case) or missing_prompts(case) or not_served(self.config, case)
        if reason:
            pytest.skip(reason)

    def get(self, case: Case, speculative: bool) -> Run:
        key = repr(engine_kwargs(self.config, case, speculative))
        if key in self._failed:
            pytest.fail(self._failed[key], pytrace=False)
        if key not in self._runs:
            self._skip_unless_runnable(case)
            try:
                self._runs[key] = run_case(self.config, case, speculative)
            except Exception as error:
                # The engine's start or generate() broke: said once with its traceback (this raise), then each
                # later test of the same engine fails at once with the reason instead of starting it again.
                self._failed[key] = (f"the {'speculative' if speculative else 'target-alone'} engine of {case.id} "
                                     f"broke in an earlier test of this session: {type(error).__name__}: "
                                     f"{str(error).splitlines()[0][:300] if str(error) else ''}")
                print(f"spec-decode-ci: {self._failed[key]}", file=sys.stderr, flush=True)
                raise
        run = self._runs[key]
        assert run.stopped_at_sync is None, (
            f"vLLM's own sync check (error mode) stopped the {'speculative' if speculative else 'target-alone'} "
            f"run at a host sync in the step: {run.stopped_at_sync}")
        return run

    def speed(self, case: Case, workdir: Path) -> SpeedResult:
        """``case``'s speed, both engines as vLLM runs by default, measured by a child process (``e2e.speed``);
        once per pair of engines (cases that differ only in their prompts or floors share it)."""
        key = repr((engine_kwargs(self.config, case, False), engine_kwargs(self.config, case, True)))
        if key not in self._speeds:
            self._skip_unless_runnable(case)
            self._speeds[key] = measure(self.config, case, workdir, asked_runner())
        return self._speeds[key]
