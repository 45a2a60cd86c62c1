"""The tier catches the bugs it exists for: re-apply each regression (PR #39546's two, the later FlashInfer
and MLA builder bugs) to a copy of vLLM's module, run the build-path tier against it, and require red; the
unchanged copies must stay green."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest

from spec_decode_ci.flashinfer.regressions import ENV, REGRESSIONS, patched_backend

pytestmark = pytest.mark.selfcheck
TIER = [f"spec_decode_ci.suites.{module}" for module in
        ("test_guard_truth_table", "test_reference_equality", "test_poisoning", "test_properties",
         "test_cuda_graph_padding", "test_build_isolation", "test_page_locked_plan_inputs",
         "test_decode_context_parallel", "test_mla_builders")]

# What must go red under each regression (a subset of what does).
MUST_FAIL = {
    "old_guard": ["test_guard[prefill=yes-trtllm,decode=yes-trtllm]", "test_guard[prefill=yes-trtllm,decode=no-trtllm]"],
    "stale_indptr": ["test_trtllm_fields_equal_reference[16]", "test_poison_does_not_reach_the_kernels[trtllm-trtllm]",
                     "test_random_batches[16]", "test_random_batches[64]"],
    "stale_prefill_query_offsets": ["test_trtllm_fields_equal_reference[16]",
                                    "test_poison_does_not_reach_the_kernels[trtllm-trtllm]", "test_random_batches[16]"],
    "padded_decode_query_len": ["test_padded_batches_describe_exactly_the_real_requests[16]",
                                "test_padded_batches_describe_exactly_the_real_requests[64]"],
    "inputs_mutated": ["test_build_leaves_its_inputs_untouched[prefill=trtllm-decode=trtllm]",
                       "test_build_leaves_its_inputs_untouched[prefill=native-decode=native]"],
    "state_carried": ["test_no_state_carried_between_builds[prefill=trtllm-decode=trtllm]",
                      "test_no_state_carried_between_builds[prefill=native-decode=native]"],
    "pageable_plan_inputs": ["test_plan_host_inputs_are_page_locked[mixed]",
                             "test_plan_host_inputs_are_page_locked[prefill-only]"],
    "dcp_shared_mutation": ["test_rank_local_metadata_without_speculation[0-trtllm]",
                            "test_rank_local_metadata_without_speculation[1-native]"],
    "dcp_global_pages": ["test_rank_local_metadata[world2-rank1-native]", "test_rank_local_metadata[world4-rank3-native]"],
    "mla_prefill_host_sync": ["test_build_does_not_sync[FLASHINFER_MLA-mixed]",
                              "test_build_does_not_sync[FLASHINFER_MLA-prefill-only-chunked]"],
    "mla_context_counts_queries": ["test_fields_equal_reference[FLASHINFER_MLA-mixed]",
                                   "test_fields_equal_reference[FLASHINFER_MLA-mixed-long-context]"],
    "mla_stale_decode_seq_lens": ["test_poison_does_not_reach_the_kernels[FLASHINFER_MLA]",
                                  "test_fields_equal_reference[FLASHINFER_MLA-decode-only]"],
    "none": [],
}


def run_tier(regression: str) -> tuple[int, set[str], str]:
    env = {**os.environ, ENV: regression}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:warnings",
                           "-p", "spec_decode_ci.pytest_plugin", "-m", "build_path", "--pyargs", *TIER],
                          env=env, capture_output=True, text=True)
    failed = set(re.findall(r"^(?:FAILED|ERROR) \S*?::(\S+)", proc.stdout, re.M))
    return proc.returncode, failed, proc.stdout[-3000:]


class SelfCheckRefused(RuntimeError):
    """The tier is red on vLLM's module copied unchanged: a regression's red would say nothing."""


@pytest.fixture(scope="module")
def control():
    """The tier on the unchanged copy (regression ``none``), run once: (exit code, red tests, output tail)."""
    patched_backend("none")
    return run_tier("none")


@pytest.fixture
def green_control(control):
    code, failed, tail = control
    if code != 0 or failed:
        raise SelfCheckRefused(
            f"the self-check gives no verdicts: its control (vLLM's module copied unchanged) is not green, so a "
            f"regression's red would say nothing. Red on the control: {sorted(failed) or f'exit {code}'}\n{tail}")


def test_control_is_green(control):
    """The tier stays green on vLLM's module compiled into a copy unchanged."""
    code, failed, tail = control
    assert code == 0 and not failed, tail


@pytest.mark.parametrize("regression", sorted(set(REGRESSIONS) - {"none"}))
def test_tier_verdict_under_regression(regression, green_control):
    original = importlib.import_module(REGRESSIONS[regression].target)
    if not REGRESSIONS[regression].present(original):
        pytest.skip(f"this vLLM lacks the code {regression!r} undoes: the tier meets that bug natively here")
    unobservable = REGRESSIONS[regression].unobservable()
    if unobservable:
        pytest.skip(f"{regression!r} cannot show on this vLLM: {unobservable}")
    patched_backend(regression)  # fails here, clearly, if vLLM's code no longer has what the regression edits
    code, failed, tail = run_tier(regression)
    assert code == 1, tail
    missing = [t for t in MUST_FAIL[regression] if t not in failed]
    assert not missing, f"{regression}: expected red {missing}; red were {sorted(failed)}\n{tail}"
