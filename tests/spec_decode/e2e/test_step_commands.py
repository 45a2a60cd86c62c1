"""Each generated B200 e2e step's pytest command collects exactly the suite it is named for."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from generator.expand import expand
from generator.load import read_document
from generator.model import parse_matrix
from tests.spec_decode.e2e import cases

pytestmark = pytest.mark.e2e_offline
ROOT = Path(__file__).resolve().parents[3]
E2E_SUITES = ("eagle", "speculators_mtp", "draft_model")
TESTS_PER_CASE = ("test_greedy_output_matches_target", "test_acceptance", "test_mixed_batches_without_host_sync")


def generated_steps():
    doc = read_document(ROOT / "hardware_matrix.yaml")
    return [s for s in expand(parse_matrix(doc), doc.error) if s.suite.name in E2E_SUITES]


def collect(command: str) -> set[str]:
    args = [a for a in shlex.split(command) if not a.startswith("--junitxml")]
    assert args[:3] == ["python", "-m", "pytest"], command
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-qq", "-p", "no:cacheprovider",
                           *args[3:]], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


STEPS = generated_steps()


def test_each_e2e_suite_has_a_b200_nightly_step():
    assert sorted(s.suite.name for s in STEPS if s.device.name == "b200") == sorted(E2E_SUITES)


@pytest.mark.parametrize("step", STEPS, ids=[s.key for s in STEPS])
def test_step_collects_its_suite(step):
    collected = collect(step.pytest_command)
    expected = {f"{test}[{case.id}]" for case in cases.load().cases(step.suite.name) for test in TESTS_PER_CASE}
    assert {node.rsplit("::", 1)[1] for node in collected} == expected
    assert {node.split("::", 1)[0] for node in collected} == {f"tests/spec_decode/e2e/test_{step.suite.name}.py"}
    assert len(collected) == len(expected)
