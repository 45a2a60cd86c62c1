"""The shared e2e checks turn red on the runs they exist to reject (fed recorded runs, no engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spec_decode_ci.e2e import cases, checks
from spec_decode_ci.e2e.runner import BuildLog, Run

CONFIG = cases.load()
CASE = CONFIG.cases("eagle")[0]


def runs_of(run: Run):
    return SimpleNamespace(config=CONFIG, get=lambda case, speculative: run)


def run_with(backends: dict[str, str], batches=((2, 3),), syncs=()) -> Run:
    log = BuildLog(batches=list(batches), syncs=list(syncs), syncs_per_build=[len(syncs)])
    return Run([[1, 2]], log, {}, 1.0, backends)


def ignore(*_):
    pass


def test_a_drafter_on_another_backend_is_red():
    wanted = CONFIG.engine.attention_backend
    checks.check_attention_backends(runs_of(run_with({"model.layers.0": wanted, "model.layers.1": wanted})),
                                    CASE, ignore)
    with pytest.raises(AssertionError, match="model.layers.2.*FLASH_ATTN"):
        checks.check_attention_backends(
            runs_of(run_with({"model.layers.0": wanted, "model.layers.2": "FLASH_ATTN"})), CASE, ignore)
    with pytest.raises(AssertionError, match="no attention layers"):
        checks.check_attention_backends(runs_of(run_with({})), CASE, ignore)


def test_a_sync_in_build_or_no_mixed_batch_is_red():
    checks.check_batches_and_syncs(runs_of(run_with({})), CASE, ignore)
    with pytest.raises(AssertionError, match="host syncs"):
        checks.check_batches_and_syncs(runs_of(run_with({}, syncs=["flashinfer.py:1: synchronizing"])), CASE, ignore)
    with pytest.raises(AssertionError, match="0 mixed prefill"):
        checks.check_batches_and_syncs(runs_of(run_with({}, batches=[(2, 0), (0, 3)])), CASE, ignore)


def test_e2e_suites_come_from_the_suite_classes():
    assert set(checks.e2e_suites()) == {"eagle", "speculators_mtp", "draft_model"} <= set(CONFIG.suites)
