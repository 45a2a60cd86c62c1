"""vLLM's model-class facts (``$VLLM_CACHE_ROOT/modelinfos``), filled for a pytest session by one process.

Unless its cache holds them, vLLM inspects each model architecture a config names in a fresh Python process that
imports vLLM again: 8 to 18 s per architecture on a CPU, in each xdist worker, on every fresh machine (each build
of vLLM's CI). ``start`` (the harness's plugin, as the session starts) runs one process that makes the configs the
suites make (``warm_up``: each backend's default harness, then each e2e case's engine configs) with vLLM's
inspections in that process; ``engine_config`` waits for the warm-up's stage of its config (the build path's first:
the tests closest to PR #39546 run first). The tests read what vLLM's own code wrote; where the warm-up failed or
is late, vLLM inspects as it always does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

ENV = "SPEC_DECODE_CI_MODEL_INFO_WARM_UP"  # the folder where the session's warm-up marks each stage it ended
STAGES = ("build_path", "e2e")  # in the warm-up's order
WAIT_S = 180  # the longest a config waits for the warm-up (it imports vLLM and makes a few dozen configs)
_waited: set[str] = set()


def start() -> subprocess.Popen | None:
    """Start the warm-up for this session and its children (none where an enclosing session's runs)."""
    if os.environ.get(ENV):
        return None
    done = tempfile.mkdtemp(prefix="spec-decode-ci-model-info-")
    os.environ[ENV] = done  # before xdist starts its workers: they and every child run inherit it
    return subprocess.Popen([sys.executable, "-m", "spec_decode_ci.model_info", str(done)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait(stage: str) -> None:
    """Wait, once per process and stage, for the session's warm-up to end ``stage`` (at most ``WAIT_S``)."""
    done = os.environ.get(ENV)
    if stage in _waited or not done:
        return
    _waited.add(stage)
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(os.path.join(done, stage)) and time.monotonic() < deadline:
        time.sleep(0.2)


def engine_config(stage: str, **kwargs: Any):
    """``EngineArgs(**kwargs).create_engine_config()``, after the warm-up's ``stage`` (one of ``STAGES``)."""
    from vllm.engine.arg_utils import EngineArgs

    wait(stage)
    return EngineArgs(**kwargs).create_engine_config()


def warm_up() -> Iterator[str]:
    """Make each registered backend's default harness, then each e2e case's engine configs (offline, fake hub),
    vLLM's model-class inspections in this process; yields each stage of ``STAGES`` as it ends."""
    import contextlib

    from spec_decode_ci import compat
    from spec_decode_ci.backends import BACKENDS
    from spec_decode_ci.e2e import cases, fake_hub
    from spec_decode_ci.emulation import BLACKWELL

    with compat.model_classes_inspected_here(), tempfile.TemporaryDirectory() as tmp:
        for backend in BACKENDS.values():
            with contextlib.suppress(Exception):  # its own tests report it
                backend.make_harness(backend.options_class()(), BLACKWELL)
        yield "build_path"
        config, cache = cases.load(), Path(tmp) / "hub"
        all_cases = [case for suite in config.suites for case in config.cases(suite)]
        for case in all_cases:
            fake_hub.populate(cache, case)
        with fake_hub.offline_hub(cache):
            for case in all_cases:
                for speculative in (True, False):
                    with contextlib.suppress(Exception):
                        cases.offline_engine_config(config, case, speculative)
        yield "e2e"


def main(done: str) -> None:
    os.environ.pop(ENV, None)  # this process makes configs without waiting for itself
    try:
        for stage in warm_up():
            (Path(done) / stage).write_text("")
    finally:
        for stage in STAGES:  # a warm-up that failed keeps nobody waiting
            (Path(done) / stage).write_text("")


if __name__ == "__main__":
    main(sys.argv[1])
