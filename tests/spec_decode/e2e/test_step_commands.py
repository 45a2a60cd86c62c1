"""Each generated B200 e2e step's pytest command collects exactly the suite it is named for."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import spec_decode_ci
from spec_decode_ci.generator.expand import expand
from spec_decode_ci.generator.load import read_document
from spec_decode_ci.generator.model import parse_matrix
from spec_decode_ci.generator.names import RESULTS_OPTION
from spec_decode_ci.capabilities import MATRIX_NAME, find_matrix
from spec_decode_ci.e2e import cases
from spec_decode_ci.e2e.checks import SuiteTests

from . import E2E_SUITE_PACKAGE, e2e_suites

pytestmark = pytest.mark.harness
MATRIX = find_matrix()  # the checkout's matrix; absent where only the installed suites are (vLLM's CI image)
TESTS_PER_CASE = tuple(name for name in dir(SuiteTests) if name.startswith("test_"))


def generated_steps():
    if MATRIX is None:
        return []
    doc = read_document(MATRIX)
    return [s for s in expand(parse_matrix(doc), doc.error)
            if s.suite and all(t.startswith(E2E_SUITE_PACKAGE + ".") for t in s.suite.tests)]


def collect(command: str, env: dict[str, str], cwd: Path) -> set[str]:
    # collected in ``cwd``, outside the checkout, as a CI step runs in vLLM's tree: the checkout's own
    # spec_decode_ci folder would stand in for the installed package (it lacks the generator and the suites)
    args = [a for a in shlex.split(command) if not a.startswith(("--junitxml", RESULTS_OPTION))]
    assert args[:3] == ["python", "-m", "pytest"], command
    # node ids relative to where the suites are installed: from a folder outside it they name no file
    rootdir = Path(spec_decode_ci.__file__).parent.parent
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-qq", "-p", "no:cacheprovider",
                           f"--rootdir={rootdir}", *args[3:]], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


STEPS = generated_steps()


@pytest.fixture(autouse=True)
def needs_matrix():
    if MATRIX is None:
        pytest.skip(f"no {MATRIX_NAME} here or above (the generated steps come from the checkout's matrix)")


def test_each_e2e_suite_has_a_b200_nightly_step():
    b200 = [s for s in STEPS if s.device.name == "b200"]
    assert sorted(s.suite.name for s in b200) == sorted(e2e_suites())
    assert all(s.suite.schedule == "nightly" and s.suite.optional for s in b200)


@pytest.mark.parametrize("step", STEPS, ids=[s.key for s in STEPS])
def test_step_collects_its_suite(step, tmp_path):
    """Every case of the suite behind each of the step's test files, under the step's own env, and nothing else."""
    env = dict(step.suite.env)
    config = cases.load(env.get(cases.CONFIG_ENV))
    expected = {f"{module.rsplit('.', 1)[1]}.py::{test}[{case.id}]" for module in step.suite.tests
                for case in config.cases(module.rsplit(".", 1)[1].removeprefix("test_")) for test in TESTS_PER_CASE}
    collected = {Path(node.split("::", 1)[0]).name + "::" + node.rsplit("::", 1)[1]
                 for node in collect(step.run_command, env, tmp_path)}
    assert expected and collected == expected
