"""Speculators-format checkpoints and MTP through vLLM's LLM on B200: greedy output, acceptance, mixed batches, no host sync in build().

Cases come from spec_decode_e2e.yaml (suite `speculators_mtp`)."""

from __future__ import annotations

import pytest

from tests.spec_decode.e2e import cases, checks

pytestmark = [pytest.mark.e2e, checks.TRTLLM_ATTENTION]

CONFIG = cases.load()
CASES = CONFIG.cases("speculators_mtp")
IDS = [c.id for c in CASES]


@pytest.fixture(scope="module")
def runs():
    return checks.CaseRuns(CONFIG)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_greedy_output_matches_target(runs, case, record_property):
    checks.check_greedy_output(runs, case, record_property)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_acceptance(runs, case, record_property):
    checks.check_acceptance(runs, case, record_property)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mixed_batches_without_host_sync(runs, case, record_property):
    checks.check_batches_and_syncs(runs, case, record_property)
