"""The wheel installs one top-level name, and its suites run from a directory that holds vLLM's own `tests/`
tree (with `tests/spec_decode/__init__.py` and `conftest.py`) without either package shadowing the other."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spec_decode_ci.capabilities import find_checkout

REPO = find_checkout()  # the wheel is built from the checkout; without one there is nothing to build
DECOY_CONFTEST = '''import pytest


@pytest.fixture
def vllm_decoy_fixture():
    return "vllm"
'''
DECOY_TEST = '''def test_decoy_conftest_is_vllms(vllm_decoy_fixture):
    assert vllm_decoy_fixture == "vllm"
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from this checkout, installed into its own directory, and a decoy vLLM tree."""
    if REPO is None:
        pytest.skip("needs the spec-decode-ci checkout (no hardware_matrix.yaml here or above)")
    root = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "-w", str(root / "dist"), str(REPO)], check=True, capture_output=True)
    wheel = next((root / "dist").glob("spec_decode_ci-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(root / "site"),
                    str(wheel)], check=True, capture_output=True)
    decoy = root / "vllm-workspace" / "tests"
    (decoy / "spec_decode").mkdir(parents=True)
    (decoy / "__init__.py").write_text("")
    (decoy / "spec_decode" / "__init__.py").write_text("")
    (decoy / "spec_decode" / "conftest.py").write_text(DECOY_CONFTEST)
    (decoy / "spec_decode" / "test_decoy.py").write_text(DECOY_TEST)
    return wheel, root / "site", decoy


def run_in(decoy: Path, site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], cwd=decoy, env=env, capture_output=True, text=True)


def test_wheel_has_one_top_level_name(installed):
    wheel, _, _ = installed
    names = {n.split("/", 1)[0] for n in zipfile.ZipFile(wheel).namelist() if not n.split("/", 1)[0].endswith(
        (".dist-info", ".data"))}
    assert names == {"spec_decode_ci"}
    files = set(zipfile.ZipFile(wheel).namelist())
    assert {"spec_decode_ci/pipelines/test_area.yaml.j2", "spec_decode_ci/e2e/cases.yaml",
            "spec_decode_ci/suites/test_guard_truth_table.py"} <= files


def test_wheel_carries_the_data_the_package_reads(installed):
    """The sentinel corpus's measured verdicts and the hardware matrix (the emulated GPUs come from it) are in the
    wheel, the matrix as the checkout's file itself."""
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
        assert "spec_decode_ci/sync/verdicts.json" in files
        assert whl.read("spec_decode_ci/hardware_matrix.yaml") == (REPO / "hardware_matrix.yaml").read_bytes()


def test_sentinel_imports_without_vllm_and_both_packages_resolve(installed):
    _, site, decoy = installed
    code = ("import sys; sys.path.insert(0, '..'); import spec_decode_ci.sync, spec_decode_ci.emulation, spec_decode_ci.capabilities; "
            "assert 'vllm' not in sys.modules, 'the sentinel pulled in vLLM'; "
            "import spec_decode_ci.suites, tests.spec_decode; "
            "print(spec_decode_ci.__file__); print(tests.spec_decode.__file__)")
    proc = run_in(decoy, site, "-c", code)
    assert proc.returncode == 0, proc.stderr
    ours, theirs = proc.stdout.split()
    assert ours.startswith(str(site)) and theirs.startswith(str(decoy))


@pytest.mark.packaging
def test_build_path_tier_runs_through_the_plugin_beside_vllms_tests(installed):
    _, site, decoy = installed
    proc = run_in(decoy, site, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "spec_decode_ci.pytest_plugin",
                  "-m", "build_path or not build_path", "spec_decode/test_decoy.py",
                  "--pyargs", "spec_decode_ci.suites.test_guard_truth_table")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    passed = [line for line in proc.stdout.splitlines() if line.startswith("PASSED ")]
    assert "PASSED spec_decode/test_decoy.py::test_decoy_conftest_is_vllms" in passed
    # ours, installed: the six uniform-backend cases run on every release (mixed ones need per-phase TRTLLM)
    assert sum(line.startswith("PASSED ::test_guard[") for line in passed) >= 6, proc.stdout[-2000:]


@pytest.mark.packaging
def test_every_suite_module_collects_from_the_install(installed):
    """What a CI step collects in vLLM's image (the whole suites package, no checkout): no module may fail to
    import there, whatever the markers then select."""
    _, site, decoy = installed
    proc = run_in(decoy, site, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                  "-p", "spec_decode_ci.pytest_plugin", "--pyargs", "spec_decode_ci.suites")
    assert proc.returncode == 0 and "error" not in proc.stdout.splitlines()[-1].lower(), proc.stdout[-3000:]


def test_generate_pipeline_runs_from_the_install(installed, tmp_path):
    _, site, decoy = installed
    output = tmp_path / "spec_decode.yaml"
    proc = run_in(decoy, site, "-m", "spec_decode_ci.generator", "--matrix", str(REPO / "hardware_matrix.yaml"),
                  "--output", str(output))
    assert proc.returncode == 0, proc.stderr
    assert output.read_text() == (REPO / ".buildkite" / "test_areas" / "spec_decode.yaml").read_text()
