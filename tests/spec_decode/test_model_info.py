"""The warm-up of vLLM's model-class facts (spec_decode_ci.model_info): after it, the configs the suites make start
no Python process, where on an empty cache the same config starts one (vLLM's inspection of the model class)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from spec_decode_ci import model_info
from spec_decode_ci.e2e import cases, fake_hub

pytestmark = pytest.mark.harness

# In a fresh process (vLLM keeps what it inspected in the process too): each e2e case's configs (argv[2] "all")
# or the first case's speculative one ("first"), and the commands of the Python processes each started.
CONFIGS_AND_THEIR_PROCESSES = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    started = []  # the Python processes started (not a library's probe such as ldconfig)

    def audit(event, args):
        if event == "subprocess.Popen" and isinstance(args[1], (list, tuple)) and args[1][:1] == [sys.executable]:
            started.append(args[1])

    sys.addaudithook(audit)
    from spec_decode_ci.e2e import cases, fake_hub

    config = cases.load()
    every_case = config.all_cases()
    made = {}
    with fake_hub.offline_hub(Path(sys.argv[1])):
        for case in every_case[:1] if sys.argv[2] == "first" else every_case:
            for speculative in (True,) if sys.argv[2] == "first" else (True, False):
                before = len(started)
                cases.offline_engine_config(config, case, speculative)
                made[f"{case.suite}-{case.id} speculative={speculative}"] = started[before:]
    print("MADE", json.dumps(made))  # vLLM logs to stdout too
""")


def test_after_the_warm_up_the_suites_configs_start_no_python_process(tmp_path):
    hub = tmp_path / "hub"
    for case in cases.load().all_cases():
        fake_hub.populate(hub, case)
    env = {k: v for k, v in os.environ.items() if k != model_info.ENV}  # not this session's own warm-up

    def configs(cache_root, which: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", CONFIGS_AND_THEIR_PROCESSES, str(hub), which],
                                env={**env, "VLLM_CACHE_ROOT": str(cache_root)}, stdout=subprocess.PIPE, text=True)

    stages = tmp_path / "stages"
    stages.mkdir()
    control = configs(tmp_path / "empty", "first")
    warm_up = subprocess.Popen([sys.executable, "-m", "spec_decode_ci.model_info_warm_up", str(stages)],
                               env={**env, "VLLM_CACHE_ROOT": str(tmp_path / "warm")})
    assert warm_up.wait(timeout=300) == 0 and sorted(p.name for p in stages.iterdir()) == sorted(model_info.STAGES)
    checked = configs(tmp_path / "warm", "all")
    control_made, made = (json.loads(p.communicate(timeout=300)[0].split("\nMADE ")[-1]) for p in (control, checked))
    assert all(control_made.values()), f"control: on an empty cache vLLM inspects in a process: {control_made}"
    started = [config for config, inspected in made.items() if inspected]
    assert made and not started, f"expected no inspection process after the warm-up; came one for {started}"


def test_a_config_waits_for_its_stage_and_not_for_a_warm_up_that_ended(tmp_path, monkeypatch):
    """A warm-up's stage mark ends the wait as soon as it is written; a warm-up whose process ended without marking
    the stage (it crashed) keeps nobody waiting."""
    import time

    monkeypatch.setattr(model_info, "_waited", set())
    monkeypatch.setenv(model_info.ENV, str(tmp_path))
    (tmp_path / model_info.LOCK).write_text("")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, pathlib, time
        lock = open({str(tmp_path / model_info.LOCK)!r})
        fcntl.flock(lock, fcntl.LOCK_EX)
        pathlib.Path({str(tmp_path / "locked")!r}).write_text("")
        time.sleep(2)
        pathlib.Path({str(tmp_path / "build_path")!r}).write_text("")
        time.sleep(60)
    """)])
    try:
        while not (tmp_path / "locked").exists():
            time.sleep(0.05)
        start = time.monotonic()
        model_info.wait("build_path")
        assert 1.5 < time.monotonic() - start < 30 and (tmp_path / "build_path").exists()
    finally:
        holder.kill()
        holder.wait()
    start = time.monotonic()
    model_info.wait("e2e")  # never marked, its process gone
    assert time.monotonic() - start < 5 and not (tmp_path / "e2e").exists()
