"""Which GPU model runner an e2e run asks for, which one vLLM picks for a case by its own rules, and what vLLM
logged about that choice.

``SPEC_DECODE_E2E_RUNNER=V1`` or ``V2`` asks for one runner for the whole run (vLLM's own switch,
``VLLM_USE_V2_MODEL_RUNNER``, set for every engine); unset, every case runs on the runner vLLM picks. A case
the asked runner does not serve on this vLLM (its V2 falls back to V1 for the case's method, or the runner is
not shipped) is skipped with vLLM's reason; a case whose engine runs another runner than the one asked fails.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator
from unittest import mock

from spec_decode_ci import compat
from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.vllm_log import vllm_log_lines

RUNNER_ENV = "SPEC_DECODE_E2E_RUNNER"
VLLM_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"  # vLLM's own switch between its GPU model runners
RUNNERS = {"V1": compat.V1_RUNNER, "V2": compat.V2_RUNNER}


def asked_runner() -> str | None:
    """The runner this run asks for ("V1" or "V2"), None where it leaves the choice to vLLM."""
    value = os.environ.get(RUNNER_ENV, "")
    if value and value not in RUNNERS:
        raise ValueError(f"{RUNNER_ENV}={value!r}: expected one of {', '.join(RUNNERS)}, or unset for vLLM's choice")
    return value or None


def vllm_runner_env() -> dict[str, str]:
    """vLLM's environment for the asked runner (empty where none is asked)."""
    asked = asked_runner()
    return {} if asked is None else {VLLM_RUNNER_ENV: "1" if asked == "V2" else "0"}


def engine_env() -> dict[str, str]:
    """The environment every engine of the run starts in: in this process, so that its builder and steps can be
    observed, on the asked runner."""
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", **vllm_runner_env()}


def runner_log():
    """vLLM's log lines that speak of its model runner, while inside (its reasons for falling back)."""
    return vllm_log_lines(lambda message: "runner" in message.lower())


def _configured_runner(config: cases.SuiteConfig, case: cases.Case) -> str:
    return compat.model_runner(cases.engine_config(config, case, speculative=True))


@contextmanager
def _in_engine_env() -> Iterator[None]:
    """Inside: the engines' environment, which vLLM reads afresh; its cache, where an engine turned it on, is
    taken anew in that environment (so later engines of the process still start as ``engine_env`` says)."""
    with mock.patch.dict(os.environ, engine_env()), compat.vllm_env_read_afresh():
        yield


def engine_runner(config: cases.SuiteConfig, case: cases.Case) -> str:
    """The GPU model runner vLLM runs ``case``'s speculative engine on in this run (the asked one, or vLLM's
    pick), asked of the engine configuration vLLM builds for it (on a CPU, call it under
    ``emulated_platform()``)."""
    with _in_engine_env():
        return _configured_runner(config, case)


_PICKED: dict[str, tuple[str, list[str]]] = {}  # vLLM logs each reason once a process: keep the first


def picked_by_vllm(config: cases.SuiteConfig, case: cases.Case) -> tuple[str, list[str]]:
    """The runner ("V1", "V2") vLLM picks for ``case`` by its own rules (its switch unset), with what it logged of
    the choice."""
    key = repr(cases.engine_kwargs(config, case, speculative=True))
    if key not in _PICKED:
        with _in_engine_env():
            unset = {k: v for k, v in os.environ.items() if k != VLLM_RUNNER_ENV}
            with mock.patch.dict(os.environ, unset, clear=True), runner_log() as logged:
                _PICKED[key] = (compat.runner_name(_configured_runner(config, case)), logged)
    return _PICKED[key]


def not_served(config: cases.SuiteConfig, case: cases.Case) -> str | None:
    """Why the asked runner cannot run ``case`` on this vLLM (None: it can, or none is asked)."""
    asked = asked_runner()
    if asked is None:
        return None
    if compat.module_origin(RUNNERS[asked]) is None:
        return f"this vLLM has no model runner {asked} ({RUNNERS[asked]}), asked for by {RUNNER_ENV}"
    if asked == "V2":
        picked, logged = picked_by_vllm(config, case)
        if picked != "V2":
            return (f"this vLLM's model runner V2 does not serve case {case.id} (method {case.method}): by its own "
                    f"rules vLLM runs it on {picked}; vLLM logged: {' | '.join(logged) or 'no reason'}")
    return None


def check_ran_on_asked(runner: str | None, logged: list[str]) -> None:
    """A case's engine ran on the runner asked for; another one fails, naming what vLLM logged."""
    asked = asked_runner()
    if asked is not None and runner != asked:
        raise AssertionError(f"{RUNNER_ENV}={asked} ({VLLM_RUNNER_ENV}={vllm_runner_env()[VLLM_RUNNER_ENV]}) but "
                             f"the engine ran on {runner}; vLLM logged: {' | '.join(logged) or 'no reason'}")
