"""The warm-up of vLLM's model-class facts (spec_decode_ci.model_info): after it, the configs the suites make start
no process, where on an empty cache the same config starts one (vLLM's inspection of the model class)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spec_decode_ci.e2e import cases, fake_hub

pytestmark = pytest.mark.harness

_started: list | None = None  # while recording: the commands of the processes started


def _audit(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and _started is not None:
        _started.append(args[1])


sys.addaudithook(_audit)


def processes_started(make) -> list:
    """The commands of the processes ``make()`` starts."""
    global _started
    _started = []
    try:
        make()
        return _started
    finally:
        _started = None


def test_after_the_warm_up_the_suites_configs_start_no_process(tmp_path, monkeypatch):
    from spec_decode_ci import model_info

    config = cases.load()
    every_case = [c for suite in config.suites for c in config.cases(suite)]
    monkeypatch.delenv(model_info.ENV, raising=False)  # no waiting for this session's own warm-up
    hub = tmp_path / "hub"
    for case in every_case:
        fake_hub.populate(hub, case)
    with fake_hub.offline_hub(hub):
        first = lambda: cases.offline_engine_config(config, every_case[0], speculative=True)  # noqa: E731
        monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "empty"))
        assert processes_started(first), "control: on an empty cache vLLM inspects a model class in a process"

        warm, done = tmp_path / "warm", tmp_path / "done"
        monkeypatch.setenv("VLLM_CACHE_ROOT", str(warm))
        subprocess.run([sys.executable, "-m", "spec_decode_ci.model_info", str(done)], check=True, timeout=300)
        assert done.exists()
        for case in every_case:
            for speculative in (True, False):
                started = processes_started(lambda: cases.offline_engine_config(config, case, speculative))
                assert started == [], f"{case.suite}-{case.id} (speculative={speculative}) started {started}"
