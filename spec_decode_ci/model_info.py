"""vLLM's model-class facts (``$VLLM_CACHE_ROOT/modelinfos``), filled for a pytest session by one process.

Unless its cache holds them, vLLM inspects each model architecture a config names in a fresh Python process that
imports vLLM again: 8 to 18 s per architecture on a CPU, in each xdist worker, on every fresh machine (each build
of vLLM's CI). ``start`` (the harness's plugin, as the session starts) runs one process that makes the configs the
suites make (``spec_decode_ci.model_info_warm_up``: each backend's default harness, then each e2e case's
speculative config) with vLLM's inspections in that process. ``engine_config`` waits for the warm-up's stage of
its config: the build path's comes first, as the tests closest to PR #39546 do. The tests read what vLLM's own
code wrote; where the warm-up failed or is late, vLLM inspects as it always does.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ENV = "SPEC_DECODE_CI_MODEL_INFO_WARM_UP"  # the folder where the session's warm-up marks each stage it ended
STAGES = ("build_path", "e2e")  # in the warm-up's order
LOCK = "running"  # a file of that folder the warm-up's process holds locked while it runs
WAIT_S = 180  # the longest a config waits for the warm-up (it imports vLLM and makes a few dozen configs)
_waited: set[str] = set()


class WarmUp:
    """The warm-up's process, and the folder of its stages' marks."""

    def __init__(self):
        self.done = tempfile.mkdtemp(prefix="spec-decode-ci-model-info-")
        with open(os.path.join(self.done, LOCK), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held by the process from its first instant until it ends, however
            self.process = subprocess.Popen([sys.executable, "-m", "spec_decode_ci.model_info_warm_up", self.done],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, pass_fds=(lock.fileno(),))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.done, ignore_errors=True)


def start() -> WarmUp | None:
    """Start the warm-up for this process and its children (none where an enclosing session's runs)."""
    if os.environ.get(ENV):
        return None
    warm_up = WarmUp()
    os.environ[ENV] = warm_up.done  # before xdist starts its workers: they and every child run inherit it
    return warm_up


def wait(stage: str) -> None:
    """Wait, once per process and stage, for the session's warm-up to end ``stage`` (at most ``WAIT_S``)."""
    done = os.environ.get(ENV)
    if stage in _waited or not done:
        return
    _waited.add(stage)
    deadline = time.monotonic() + WAIT_S
    if not os.path.exists(os.path.join(done, LOCK)):
        return  # the warm-up was stopped
    with open(os.path.join(done, LOCK)) as lock:
        while not os.path.exists(os.path.join(done, stage)) and time.monotonic() < deadline:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return  # the warm-up's process has ended without marking the stage
            except BlockingIOError:
                time.sleep(0.2)


def engine_config(stage: str, **kwargs: Any):
    """``EngineArgs(**kwargs).create_engine_config()``, after the warm-up's ``stage`` (one of ``STAGES``)."""
    from vllm.engine.arg_utils import EngineArgs

    wait(stage)
    return EngineArgs(**kwargs).create_engine_config()
