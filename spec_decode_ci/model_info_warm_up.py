"""The warm-up of vLLM's model-class facts (``spec_decode_ci.model_info``), run as its own process:
``python -m spec_decode_ci.model_info_warm_up <folder>`` marks each stage of ``model_info.STAGES`` there as it
ends."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from spec_decode_ci import compat
from spec_decode_ci.backends import BACKENDS
from spec_decode_ci.e2e import cases, fake_hub
from spec_decode_ci.emulation import BLACKWELL
from spec_decode_ci.model_info import ENV, STAGES


def warm_up() -> Iterator[str]:
    """Make each registered backend's default harness, then each e2e case's speculative config (offline, fake hub),
    vLLM's model-class inspections in this process; yields each stage of ``STAGES`` as it ends."""
    with compat.model_classes_inspected_here(), tempfile.TemporaryDirectory() as tmp:
        for backend in BACKENDS.values():
            with contextlib.suppress(Exception):  # its own tests report it
                backend.make_harness(backend.options_class()(), BLACKWELL)
        yield "build_path"
        config = cases.load()
        with fake_hub.offline_hub_of(Path(tmp) / "hub", config.all_cases()):
            for case in config.all_cases():  # a speculative config names its target's architecture and its drafter's
                with contextlib.suppress(Exception):
                    cases.offline_engine_config(config, case, speculative=True)
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
