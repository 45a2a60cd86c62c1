"""vLLM's model-class facts (``$VLLM_CACHE_ROOT/modelinfos``), filled for a pytest session by one process.

Unless its cache holds them, vLLM inspects each model architecture a config names in a fresh Python process that
imports vLLM again: 8 to 18 s per architecture on a CPU, in each xdist worker, on every fresh machine (each build
of vLLM's CI). ``start`` (the harness's plugin, as the session starts) runs one process that makes the configs the
suites make (``warm_up``: each backend's default harness, each e2e case's engine configs) with vLLM's inspections
in that process; ``engine_config`` waits for it before it makes a config. The tests read what vLLM's own code
wrote; where the warm-up failed or is late, vLLM inspects as it always does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV = "SPEC_DECODE_CI_MODEL_INFO_WARM_UP"  # the file the session's warm-up writes when it ends
WAIT_S = 180  # the longest a config waits for the warm-up (it imports vLLM and makes a few dozen configs)
_waited = False


def start() -> subprocess.Popen | None:
    """Start the warm-up for this session and its children (none where an enclosing session's runs)."""
    if os.environ.get(ENV):
        return None
    done = Path(tempfile.mkdtemp(prefix="spec-decode-ci-model-info-")) / "done"
    os.environ[ENV] = str(done)  # before xdist starts its workers: they and every child run inherit it
    return subprocess.Popen([sys.executable, "-m", "spec_decode_ci.model_info", str(done)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait() -> None:
    """Wait, once per process, for the session's warm-up to end (at most ``WAIT_S``)."""
    global _waited
    done = os.environ.get(ENV)
    if _waited or not done:
        return
    _waited = True
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.2)


def engine_config(**kwargs: Any):
    """``EngineArgs(**kwargs).create_engine_config()``, after the session's warm-up."""
    from vllm.engine.arg_utils import EngineArgs

    wait()
    return EngineArgs(**kwargs).create_engine_config()


def warm_up() -> None:
    """Make each registered backend's default harness and each e2e case's engine configs (offline, fake hub),
    vLLM's model-class inspections in this process."""
    import contextlib

    from spec_decode_ci import compat
    from spec_decode_ci.backends import BACKENDS
    from spec_decode_ci.e2e import cases, fake_hub
    from spec_decode_ci.emulation import BLACKWELL

    with compat.model_classes_inspected_here(), tempfile.TemporaryDirectory() as tmp:
        for backend in BACKENDS.values():
            with contextlib.suppress(Exception):  # its own tests report it
                backend.make_harness(backend.options_class()(), BLACKWELL)
        config, cache = cases.load(), Path(tmp) / "hub"
        all_cases = [case for suite in config.suites for case in config.cases(suite)]
        for case in all_cases:
            fake_hub.populate(cache, case)
        with fake_hub.offline_hub(cache):
            for case in all_cases:
                for speculative in (True, False):
                    with contextlib.suppress(Exception):
                        cases.offline_engine_config(config, case, speculative)


def main(done: str) -> None:
    os.environ.pop(ENV, None)  # this process makes configs without waiting for itself
    try:
        warm_up()
    finally:
        Path(done).write_text("")


if __name__ == "__main__":
    main(sys.argv[1])
