"""A vLLM the harness does not know (a module gone, a field renamed) ends every test that depends on it in
``compat.MissingVllmField``, reported as an error, never as a failure, with one line saying the harness cannot
drive this vLLM; tests that do not depend on it still pass."""

from __future__ import annotations

import re

import pytest

from spec_decode_ci.pytest_run import run_pytest
from spec_decode_ci.suites.vllm_changes import HIDE_ENV, RENAME_ENV

pytestmark = pytest.mark.harness


def run_changed(env: dict[str, str], *modules: str, runs=None, workers: int = 0) -> tuple[int, str]:
    """The build-path tests of ``modules`` against the changed vLLM ``env`` describes: forked from ``runs``
    (``vllm_forked_pytest``), or with ``workers`` xdist workers in a child process."""
    targets = tuple(f"spec_decode_ci.suites.{m}" for m in modules)
    plugins = ("spec_decode_ci.suites.vllm_changes",)
    run = runs.run(*targets, marker="build_path", env=env, plugins=plugins) if runs is not None else \
        run_pytest(*targets, marker="build_path", env=env, plugins=plugins, workers=workers)
    return run.returncode, run.output


def outcomes(output: str) -> dict[str, int]:
    last = output.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", last)}


def assert_harness_breakage(code: int, output: str, missing: str) -> dict[str, int]:
    counts = outcomes(output)
    assert code == 1, output[-3000:]
    assert not counts.get("failed"), f"a test failed instead of ending in MissingVllmField:\n{output[-3000:]}"
    errors = counts.get("errors", counts.get("error", 0))
    lines = [line for line in output.splitlines() if line.startswith("the harness cannot drive this vLLM: ")]
    assert len(lines) == 1 and missing in lines[0], output[-3000:]
    # every error is one the summary line counts as the harness's breakage
    assert errors and sum(int(n) for n in re.findall(r": (\d+) tests?\b", lines[0])) == errors, output[-3000:]
    return counts


def test_hidden_runner_modules_end_the_padding_tests_in_missing_vllm_field(vllm_forked_pytest):
    code, output = run_changed({HIDE_ENV: "vllm.v1.worker.gpu_model_runner,vllm.v1.worker.gpu.model_runner"},
                               "test_cuda_graph_padding", runs=vllm_forked_pytest)
    counts = assert_harness_breakage(code, output, "gpu_model_runner / gpu.model_runner")
    assert counts.get("passed") == 2, output[-3000:]  # the two runner rules that need no vLLM runner


def test_renamed_metadata_field_ends_every_batch_test_in_missing_vllm_field(vllm_forked_pytest):
    code, output = run_changed({RENAME_ENV: "vllm.v1.attention.backend:seq_lens_cpu_upper_bound:seq_lens_host_bound"},
                               "test_guard_truth_table", runs=vllm_forked_pytest)
    assert_harness_breakage(code, output, "seq_lens_cpu_upper_bound")


def test_an_mla_backend_whose_module_is_gone_is_breakage_not_a_skip(vllm_forked_pytest):
    """A backend on vLLM's SM100 MLA list whose module no longer exists errors in every test of it, summed up in
    the one line; the other backends' tests still pass."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    module = AttentionBackendEnum["FLASHMLA"].get_path().rsplit(".", 1)[0]
    code, output = run_changed({HIDE_ENV: module}, "test_mla_builders", runs=vllm_forked_pytest)
    counts = assert_harness_breakage(code, output, f"{module} has no FlashMLABackend")
    assert counts.get("passed"), output[-3000:]
    assert "FLASHMLA: " not in output, output[-3000:]  # not skipped with a reason


def test_without_flashinfer_the_run_ends_at_collection_in_one_line():
    """vLLM's CPU image has no FlashInfer: the run stops before any test, naming the module and the image the
    suites expect (no ImportError per test, no green run of skips)."""
    code, output = run_changed({HIDE_ENV: "flashinfer"}, "test_guard_truth_table", "test_sentinel_corpus")
    assert code == 4, output[-3000:]
    lines = [line for line in output.splitlines() if "FlashInfer backend" in line]
    assert len(lines) == 1 and "No module named 'flashinfer'" in lines[0] and "CUDA image" in lines[0], output[-3000:]
    assert " passed" not in output and "ImportError" not in output, output[-3000:]


def test_without_flashinfer_an_xdist_run_ends_before_its_workers_start():
    """Under pytest-xdist the controller checks first (workers would otherwise crash one by one)."""
    pytest.importorskip("xdist", reason="needs pytest-xdist (pip install 'spec-decode-ci[suites]')")
    code, output = run_changed({HIDE_ENV: "flashinfer"}, "test_guard_truth_table", workers=2)
    assert code == 4 and "INTERNALERROR" not in output, output[-3000:]
    assert "No module named 'flashinfer'" in output and "CUDA image" in output and " passed" not in output
