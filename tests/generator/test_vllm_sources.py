"""The vLLM source the harness's steps watch: named once in the matrix (``vllm_sources``), every path present in
the installed vLLM, both model runners' speculative code behind every speculative-decoding step."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from spec_decode_ci import compat
from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.load import parse_text
from spec_decode_ci.generator.model import load_matrix, parse_matrix
from tests.generator.conftest import REPO_ROOT

MATRIX = load_matrix(REPO_ROOT / "hardware_matrix.yaml")
# A model runner's set may be absent only where this vLLM does not ship that runner (V1 left vLLM in 0.34).
RUNNER_SETS = {"spec_decode_runner_v1": compat.V1_RUNNER, "spec_decode_runner_v2": compat.V2_RUNNER}


def installed_vllm_root() -> Path | None:
    """The folder holding the installed ``vllm`` package (found without importing it)."""
    spec = importlib.util.find_spec("vllm")
    return Path(spec.origin).parent.parent if spec and spec.origin else None


def missing(paths, root: Path) -> list[str]:
    """The paths (``vllm/...``; a folder ends in ``/``) that ``root`` does not hold as that kind of entry."""
    return [p for p in paths if not ((root / p).is_dir() if p.endswith("/") else (root / p).is_file())]


def test_every_source_path_exists_in_the_installed_vllm():
    root = installed_vllm_root()
    if root is None:
        pytest.skip("vLLM is not installed here: nothing to hold the matrix's vllm_sources against")
    from importlib.metadata import version

    shipped = {name for name, runner in RUNNER_SETS.items() if compat.module_origin(runner) is not None}
    assert shipped, "this vLLM ships neither model runner the matrix's sets name"
    gone = {name: missing(paths, root) for name, paths in MATRIX.vllm_sources.items()
            if name in shipped or name not in RUNNER_SETS}
    gone = {name: paths for name, paths in gone.items() if paths}
    assert not gone, (f"hardware_matrix.yaml vllm_sources names paths vLLM {version('vllm')} does not have "
                      f"(moved or removed in vLLM: steps on them would no longer trigger): {gone}")


def test_a_moved_file_is_seen(tmp_path):
    (tmp_path / "vllm" / "v1" / "spec_decode").mkdir(parents=True)
    (tmp_path / "vllm" / "v1" / "worker").mkdir(parents=True)
    (tmp_path / "vllm" / "v1" / "worker" / "gpu_model_runner").mkdir()  # a folder where a file was named
    paths = ["vllm/v1/spec_decode/", "vllm/v1/worker/gpu_model_runner.py", "vllm/v1/worker/gpu/spec_decode/"]
    assert missing(paths, tmp_path) == paths[1:]


def speculative_steps():
    """The test-area suites that run speculative decoding (the e2e tier) or gate every change (build path)."""
    return [s for s in MATRIX.suites.values() if "test-area" in s.pipelines
            and (re.search(r"\be2e\b", s.markers or "") or s.schedule == "every_change")]


@pytest.mark.parametrize("suite", speculative_steps(), ids=lambda s: s.name)
def test_speculative_steps_watch_both_runners_speculative_code(suite):
    for name in RUNNER_SETS:
        absent = [p for p in MATRIX.vllm_sources[name] if p not in suite.source_file_dependencies]
        assert not absent, f"suite {suite.name} does not watch {name}: {absent}"


MINIMAL = """\
test_area: {{group: G}}
devices:
  cpu: {{test_area_device: cpu, display_name: CPU, emoji: ":c:"}}
vllm_sources:
  runner: [vllm/v1/spec_decode/]
{sources}suites:
  s:
    key: s-harness
    label: S
    devices: [cpu]
    schedule: every_change
    timeout_in_minutes: 5
    tests: [spec_decode_ci.suites]
{suite}"""


def parse(sources: str = "", suite: str = "    vllm_sources: [runner]\n"):
    return parse_matrix(parse_text(MINIMAL.format(sources=sources, suite=suite), "hardware_matrix.yaml"))


def test_a_suite_gets_its_sets_paths_then_its_own_once_each():
    matrix = parse(sources="  other: [vllm/sampling_params.py, vllm/v1/spec_decode/]\n",
                   suite="    vllm_sources: [runner, other]\n    source_file_dependencies: [tests/x/, vllm/v1/spec_decode/]\n")
    assert matrix.suites["s"].source_file_dependencies == ("vllm/v1/spec_decode/", "vllm/sampling_params.py",
                                                           "tests/x/")


@pytest.mark.parametrize("sources, suite, path, says", [
    ("", "    vllm_sources: [runnr]\n", "suites.s.vllm_sources.0", "expected one of runner, got 'runnr'"),
    ("  bad: [tests/v1/spec_decode/]\n", "    vllm_sources: [runner]\n", "vllm_sources.bad.0",
     "expected a path in vLLM's package, 'vllm/...'"),
    ("", "", "suites.s", "expected `vllm_sources` (sets named under the top-level vllm_sources) or "
                         "`source_file_dependencies`"),
])
def test_a_bad_source_set_is_located(sources, suite, path, says):
    with pytest.raises(InputError) as info:
        parse(sources, suite)
    assert info.value.path == path and says in info.value.message
