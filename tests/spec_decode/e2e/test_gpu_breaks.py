"""spec_decode_ci.e2e.gpu_breaks: every break of the GPU self-check applies to the installed vLLM, and an
installed break changes vLLM's behaviour in this process without touching the installed file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from spec_decode_ci.e2e.gpu_breaks import (
    BREAKS, break_args, case_selection, engine_runner, gpu_slots, not_run_here, patched_source, run_on_gpus, smoke_with_tiny_configs,
    verdict,
)
from spec_decode_ci.emulation import emulated_platform
from spec_decode_ci.patches import PatchDoesNotApply, gpu_break
from spec_decode_ci.pytest_run import run_pytest

pytestmark = pytest.mark.harness


@pytest.fixture(scope="module")
def smoke_runners(tmp_path_factory) -> dict[str, str]:
    """The model runner vLLM picks for each smoke suite's engines (its first case), asked on the CPU."""
    smoke = smoke_with_tiny_configs(tmp_path_factory.mktemp("tiny-models"))
    with emulated_platform():
        return {suite: engine_runner(smoke, smoke.cases(suite)[0]) for suite in smoke.suites}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_break_applies_once_to_the_installed_vllm(name, smoke_runners):
    """Each break edits the code its suite's engines run on this vLLM; a break of the other model runner
    skips, saying which runner the engines use."""
    brk = BREAKS[name]
    reason = not_run_here(brk, smoke_runners)
    if reason:
        pytest.skip(reason)
    _, origin, patched = patched_source(brk)
    assert patched != open(origin).read()


def test_a_break_whose_code_is_gone_fails_by_name():
    gone = gpu_break("gone", "", "vllm.v1.attention.backends.flashinfer", r"no_such_code\(\)", "", "test_x", ())
    with pytest.raises(PatchDoesNotApply, match="does not apply to .*flashinfer.py"):
        patched_source(gone)


def test_a_break_matching_more_than_one_place_fails_by_name():
    """A pattern that matches twice would break whichever place comes first: refused, not applied."""
    twice = gpu_break("twice", "", "vllm.v1.attention.backends.flashinfer", r"\bdef ", "", "test_x", ())
    with pytest.raises(PatchDoesNotApply, match="matches [0-9]+ places"):
        patched_source(twice)


def test_a_break_edits_the_first_home_whose_source_has_its_code():
    """Code moved between modules: the break edits the first of its homes that is installed and holds the code
    (a home gone, or one without the code, is passed over); none holding it is the break's breakage."""
    moved = gpu_break("moved", "", "vllm.no_such_module", r"\bdef has_nvidia_artifactory\b", "def has_nvidia_artifactory",
                      "test_x", (), other_homes=("vllm.v1.attention.backends.flashinfer", "vllm.utils.flashinfer"))
    module, origin, _ = patched_source(moved)
    assert module == "vllm.utils.flashinfer" and origin.endswith("vllm/utils/flashinfer.py")
    absent = gpu_break("absent", "", "vllm.v1.attention.backends.flashinfer", r"no_such_code\(\)", "", "test_x", (),
                       other_homes=("vllm.utils.flashinfer",))
    with pytest.raises(PatchDoesNotApply, match="does not apply to .*backends/flashinfer.py"):
        patched_source(absent)
    gone = gpu_break("gone", "", "vllm.no_such_module", r"x", "", "test_x", (), other_homes=("vllm.no_such_either",))
    with pytest.raises(PatchDoesNotApply, match="no module vllm.no_such_module or vllm.no_such_either"):
        patched_source(gone)


def test_an_everywhere_break_edits_every_place():
    """``everywhere`` edits each place its pattern matches, and still refuses a pattern that matches none."""
    each = gpu_break("each", "", "vllm.v1.attention.backends.flashinfer", r"\bdef ", "def  ", "test_x", (),
                     everywhere=True)
    _, origin, patched = patched_source(each)
    original = open(origin).read()
    assert patched.count("def  ") == original.count("def ") > 1
    none = gpu_break("none", "", "vllm.v1.attention.backends.flashinfer", r"no_such_code\(\)", "", "test_x", (),
                     everywhere=True)
    with pytest.raises(PatchDoesNotApply, match="the code it edits is gone"):
        patched_source(none)


@pytest.mark.parametrize("must_fail, expected", [
    (("test_acceptance[tiny-llama-eagle1]",), ("-k", "tiny-llama-eagle1")),
    (("test_a[tiny-b]", "test_c[tiny-a]", "test_d[tiny-a]"), ("-k", "tiny-a or tiny-b")),
    (("test_without_a_case",), ()),
])
def test_a_break_runs_the_cases_its_tests_name(must_fail, expected):
    assert case_selection(must_fail) == expected


def test_every_break_names_its_cases():
    """Each break's run selects cases by its test ids: ids without a case would run the whole suite."""
    unnamed = [n for n, b in BREAKS.items() if not case_selection(b.must_fail)]
    assert not unnamed, f"expected each break's must_fail to name its cases (test[case]); came none for {unnamed}. " \
                        f"Look: spec_decode_ci/patches/e2e_breaks.py"


def test_installed_host_sync_break_is_seen_by_the_sentinel_and_leaves_the_file_alone():
    """With ``host_sync_in_build`` installed, the real builder's build() now syncs on an all-TRTLLM batch (the
    tier's sentinel sees it); the installed flashinfer.py is byte-for-byte the same."""
    _, origin, _ = patched_source(BREAKS["host_sync_in_build"])
    before = hashlib.sha256(open(origin, "rb").read()).hexdigest()
    script = textwrap.dedent("""
        from spec_decode_ci.e2e import gpu_breaks
        gpu_breaks.install("host_sync_in_build")
        import vllm.v1.attention.backends.flashinfer as fi
        assert getattr(fi, gpu_breaks.MARKER) == "host_sync_in_build"
        from spec_decode_ci.buildpath.batches import spec_decode_batch
        from spec_decode_ci.flashinfer.harness import BuildHarness
        h = BuildHarness()
        result = h.build(spec_decode_batch(3, 2, 3, 16, seed=1, decode_query_len=4), watch_syncs=True)
        print("SYNCS", len(result.syncs))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "SYNCS 1" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert hashlib.sha256(open(origin, "rb").read()).hexdigest() == before


def test_installed_vocabulary_break_turns_the_speculators_construction_red(vllm_forked_pytest):
    """With ``draft_vocab_unmapped`` installed, vLLM's EAGLE-3 class built from the tiny speculators checkpoint on
    the CPU proposes wrong tokens (the CPU test of the construction goes red); without it, that test is green."""
    construction = Path(__file__).with_name("test_tiny_models.py")

    def run(brk: str | None):
        return vllm_forked_pytest.run(str(construction), plugins=("spec_decode_ci.e2e.gpu_breaks",),
                                      extra=(*break_args(brk), "-k", "speculators"))

    broken = run("draft_vocab_unmapped")
    assert broken.returncode == 1 and "first proposal right on 0/" in broken.output, broken.tail()
    control = run(None)
    assert control.returncode == 0, control.tail()


# A library whose calls fail as vLLM's engine start does on a GPU other runs share: an error, and an assertion of
# the library's own (vLLM's memory profile asserts that no other process freed memory meanwhile).
SHARED_GPU = """
def start_engine():
    raise ValueError("Free memory on device cuda:0 (12.18/139.8 GiB) on startup is less than desired")

def profile_memory():
    assert False, "Error in memory profiling"
"""
SUITE = """
import pytest
import shared_gpu

def test_output_checked():
    assert [1, 2] == [1, 3], "the suite's own assertion"

def test_failed_by_the_suite():
    pytest.fail("the suite's own verdict")

def test_engine_did_not_start():
    shared_gpu.start_engine()

def test_memory_profile_disturbed():
    shared_gpu.profile_memory()

def test_unbroken():
    pass
"""


def test_selfcheck_counts_only_the_suites_assertions_as_caught(tmp_path):
    """A break is caught only where its tests failed on an assertion of the suite; a test that crashed inside a
    library instead (an error, or the library's own assert) leaves it INCONCLUSIVE, and a passing one MISSED."""
    (tmp_path / "shared_gpu.py").write_text(SHARED_GPU)
    (tmp_path / "test_suite.py").write_text(SUITE)
    run = run_pytest(str(tmp_path / "test_suite.py"))
    assert run.red == {"test_output_checked", "test_failed_by_the_suite", "test_engine_did_not_start",
                       "test_memory_profile_disturbed"}, run.tail()
    assert run.red_by_checks == {"test_output_checked", "test_failed_by_the_suite"}
    crashes = sorted(str(f) for f in run.failures if not f.by_a_check)
    assert crashes == ["test_engine_did_not_start: ValueError: Free memory on device cuda:0 (12.18/139.8 GiB) on "
                       "startup is less than desired (raised in shared_gpu:3)",
                       "test_memory_profile_disturbed: AssertionError: Error in memory profiling "
                       "(raised in shared_gpu:6)"]
    assert verdict(run, ("test_output_checked", "test_failed_by_the_suite")) == "red"
    assert verdict(run, ("test_output_checked", "test_memory_profile_disturbed")) == "INCONCLUSIVE"
    assert verdict(run, ("test_output_checked", "test_unbroken")) == "MISSED"
    assert verdict(run, None) == "INCONCLUSIVE"
    assert verdict(run_pytest(str(tmp_path / "test_suite.py"), extra=("-k", "checked or unbroken")), None) == "RED"
    assert verdict(run_pytest(str(tmp_path / "test_suite.py"), extra=("-k", "unbroken")), None) == "green"


def _gpu_selfcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    from spec_decode_ci.capabilities import find_checkout

    checkout = find_checkout()
    if checkout is None:
        pytest.skip("needs the spec-decode-ci checkout (scripts/ is not installed with the suites)")
    return subprocess.run([sys.executable, str(checkout / "scripts" / "gpu_selfcheck.py"), *args],
                          capture_output=True, text=True,
                          env={**os.environ, "SPEC_DECODE_E2E_CONFIG": "cases.h200_smoke.yaml", **(env or {})})


def test_gpu_selfcheck_refuses_more_runs_than_gpus():
    """--jobs 2 where one GPU is visible: a usage error saying how many are, before any run."""
    proc = _gpu_selfcheck("--jobs", "2", env={"CUDA_VISIBLE_DEVICES": "0"})
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert "2 runs at once need a GPU each; 1 visible here" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("environ, device_count, jobs, expected", [
    ({}, 4, 2, ["0", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "3, 5"}, 8, 2, ["3", "5"]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c"}, 8, 1, ["GPU-a"]),
])
def test_gpu_slots_are_the_visible_gpus(environ, device_count, jobs, expected):
    assert gpu_slots(jobs, environ, device_count) == expected


@pytest.mark.parametrize("environ, device_count", [({}, 1), ({"CUDA_VISIBLE_DEVICES": "2"}, 8),
                                                    ({"CUDA_VISIBLE_DEVICES": ""}, 8)])
def test_gpu_slots_refuse_more_jobs_than_gpus(environ, device_count):
    with pytest.raises(ValueError, match="2 runs at once need a GPU each"):
        gpu_slots(2, environ, device_count)


def test_runs_on_gpus_never_share_one():
    """Six jobs on two GPUs: results in the jobs' order, both GPUs used, never two jobs on one GPU at once."""
    lock, running, seen = threading.Lock(), {}, []

    def run(job, gpu):
        with lock:
            assert gpu not in running, f"job {job} on GPU {gpu} beside job {running.get(gpu)}"
            running[gpu] = job
            seen.append(gpu)
        time.sleep(0.05)
        with lock:
            del running[gpu]
        return job * 10

    assert run_on_gpus(list(range(6)), ["0", "1"], run) == [0, 10, 20, 30, 40, 50]
    assert set(seen) == {"0", "1"}


def test_gpu_selfcheck_refuses_an_unknown_break():
    proc = _gpu_selfcheck("no_such_break")
    assert proc.returncode == 2 and "unknown break(s) ['no_such_break']" in proc.stderr, proc.stderr[-2000:]


def test_gpu_selfcheck_without_a_gpu_says_so():
    """Where the suites cannot run (no CUDA), the self-check says why in one line and exits 2, running nothing."""
    from spec_decode_ci import capabilities

    if not capabilities.missing(("cuda",)):
        pytest.skip("this machine has CUDA: the self-check would run")
    proc = _gpu_selfcheck()
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert "gpu_selfcheck: the suites cannot run here:" in proc.stderr and "Traceback" not in proc.stderr


def test_installed_page_break_turns_the_native_plan_test_red(vllm_forked_pytest):
    """With ``native_pages_of_another_request`` installed, the pages FlashInfer's native plans are told are
    another request's (the build-path tier's native plan test goes red); without it, that test is green."""
    native_plan = Path(__file__).parents[1] / "test_native_plan.py"

    def run(brk: str | None):
        return vllm_forked_pytest.run(str(native_plan), plugins=("spec_decode_ci.e2e.gpu_breaks",),
                                      extra=(*break_args(brk), "-k", "test_native_plans_match_reference"))

    broken = run("native_pages_of_another_request")
    assert broken.returncode == 1 and broken.red == {"test_native_plans_match_reference[16]",
                                                     "test_native_plans_match_reference[64]"}, broken.tail()
    control = run(None)
    assert control.returncode == 0, control.tail()


def test_an_unknown_break_on_the_command_line_is_one_usage_line():
    """``--gpu-break`` with a name the registry lacks stops the run before any test, naming the breaks it knows."""
    run = run_pytest("spec_decode_ci.suites.e2e.test_eagle", plugins=("spec_decode_ci.e2e.gpu_breaks",),
                     extra=("--gpu-break", "no_such_break", "--collect-only"))
    assert run.returncode == 4 and "--gpu-break 'no_such_break': expected one of accept_every_draft" in run.errors, \
        f"expected pytest's usage error (exit 4) naming the known breaks; came exit {run.returncode}:\n{run.tail()}"
