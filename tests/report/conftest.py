"""Results files of real pytest runs through the harness's plugin, and a stand-in ``buildkite-agent``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spec_decode_ci import results

# One test of each ending, each recording figures the way the e2e checks do.
DEMO_TESTS = '''
import pytest


@pytest.fixture
def broken_fixture():
    raise RuntimeError("the fixture broke")


def test_passes(record_property):
    record_property("case", "eagle-tiny")
    record_property("runner", "V2")
    record_property("acceptance_per_position", {"measured": [1.0, 0.5], "expected": [1.0, 0.5]})
    record_property("host_sync_sites", {"eagle.py:10 in propose": 2})
    record_property("host_syncs_per_step_max", 0)
    record_property("engine_start_s", {"speculative": 40.0, "baseline": 30.0})


def test_fails(record_property):
    record_property("case", "eagle-tiny")
    record_property("mixed_batches", 3)
    assert 1 == 2, "acceptance | below the floor"


def test_errors(broken_fixture):
    pass


def test_skips():
    pytest.skip("needs a B200")
'''

# A stand-in for the agent's CLI: records each call's arguments and stdin; `artifact download PATH DIR --build B`
# copies $AGENT_ARTIFACTS/B/PATH into DIR/PATH, or fails as the agent does when the build has no such artifact.
STAND_IN_AGENT = '''#!/usr/bin/env python3
import json, os, shutil, sys
from pathlib import Path

calls = Path(os.environ["AGENT_CALLS"])
stdin = "" if sys.stdin.isatty() else sys.stdin.read()
with calls.open("a") as out:
    out.write(json.dumps({"args": sys.argv[1:], "stdin": stdin}) + "\\n")
if sys.argv[1:3] == ["artifact", "download"]:
    path, into, build = sys.argv[3], sys.argv[4], sys.argv[sys.argv.index("--build") + 1]
    source = Path(os.environ["AGENT_ARTIFACTS"]) / build / path
    if not source.exists():
        print(f"fatal: failed to download artifacts: no artifacts found for {path}", file=sys.stderr)
        sys.exit(1)
    target = Path(into) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
'''


def run_with_results(tmp_path: Path, source: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    """Run ``source`` as a test module through the plugin with ``--spec-decode-results``: (exit status, results)."""
    module = tmp_path / "test_demo.py"
    module.write_text(source)
    path = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "spec_decode_ci.pytest_plugin", str(module), f"--spec-decode-results={path}", *args],
                          cwd=tmp_path, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return proc.returncode, results.load(path)


@pytest.fixture
def demo_results(tmp_path) -> tuple[Path, dict]:
    status, data = run_with_results(tmp_path, DEMO_TESTS)
    assert status == 1
    return tmp_path / "results.json", data


class Agent:
    """The stand-in ``buildkite-agent`` on PATH and what it was asked."""

    def __init__(self, root: Path):
        self.bin, self.artifacts, self.log = root / "bin", root / "artifacts", root / "calls.jsonl"
        self.bin.mkdir(parents=True)
        self.artifacts.mkdir()
        script = self.bin / "buildkite-agent"
        script.write_text(STAND_IN_AGENT)
        script.chmod(0o755)

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "AGENT_CALLS": str(self.log),
                "AGENT_ARTIFACTS": str(self.artifacts)}

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def holds(self, build: str, path: str, data: dict) -> None:
        """Build ``build`` has uploaded ``data`` as the artifact ``path``."""
        target = self.artifacts / build / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data))


@pytest.fixture
def agent(tmp_path) -> Agent:
    return Agent(tmp_path / "agent")


def report(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``spec-decode-ci report ARGS`` in a child process (PATH without buildkite-agent unless ``env`` adds one)."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "buildkite-agent").exists())
    return subprocess.run([sys.executable, "-m", "spec_decode_ci.report", "report", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "PATH": path, **(env or {})})
