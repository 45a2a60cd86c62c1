"""The shared e2e checks turn red on the runs they exist to reject (fed recorded runs, no engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spec_decode_ci.e2e import cases, checks
from spec_decode_ci.e2e.runner import BuildLog, Run

from . import e2e_suites

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
    assert set(e2e_suites()) == {"eagle", "speculators_mtp", "draft_model"} <= set(CONFIG.suites)


def test_cases_with_one_target_share_its_baseline_run(monkeypatch):
    """CaseRuns starts one engine per distinct set of engine arguments: the smoke's cases on one target run the
    target alone once, and each speculative engine once, however often the checks ask."""
    smoke = cases.load(str(cases.SMOKE_CONFIG_PATH))
    started = []
    monkeypatch.setattr(checks, "run_case", lambda config, case, spec: started.append((case.id, spec)) or
                        run_with({}))
    monkeypatch.setattr(checks, "missing_weights", lambda case: None)
    monkeypatch.setattr("spec_decode_ci.capabilities.missing", lambda requires: None)
    runs = checks.CaseRuns(smoke)
    every_case = [c for s in smoke.suites for c in smoke.cases(s)]
    for _ in range(2):
        for case in every_case:
            runs.get(case, False), runs.get(case, True)
    baselines = [case_id for case_id, spec in started if not spec]
    assert len(baselines) == len({c.target for c in every_case}) < len(every_case), started
    assert sorted(case_id for case_id, spec in started if spec) == sorted(c.id for c in every_case)


def test_a_target_off_its_weights_rule_is_red(tmp_path):
    """The target alone must generate its hand-built weights' greedy continuation of every prompt: green on
    exactly that, red naming the prompt and token where one token differs, skipped for a real checkpoint."""
    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    smoke = cases.load(str(cases.SMOKE_CONFIG_PATH))
    config = smoke.with_models(write_tiny_models(tmp_path, smoke.tiny_models, {}, weights=True))
    case = config.cases("draft_model")[0]
    following = checks.weights_continuations(config, case.target)

    def check(token_ids, on=config, of=case):
        runs = SimpleNamespace(config=on, get=lambda c, speculative: Run(token_ids, BuildLog(), {}, 1.0))
        checks.check_target_follows_its_weights(runs, of, ignore)

    check(following)
    off = [list(ids) for ids in following]
    off[3][5] += 1
    with pytest.raises(AssertionError, match=f"on 1/{len(following)} prompts; prompt 3 from generated token 5: got "):
        check(off)
    with pytest.raises(pytest.skip.Exception, match="not a hand-built tiny model"):
        check(following, CONFIG, CASE)
