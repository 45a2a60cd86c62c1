"""The shared e2e checks turn red on the runs they exist to reject (fed recorded runs, no engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spec_decode_ci.e2e import case_runs, cases, checks
from spec_decode_ci.e2e.engine_run import BuildLog, Run

from . import e2e_suites

CONFIG = cases.load()
CASE = CONFIG.cases("eagle")[0]
SMOKE = cases.load(str(cases.SMOKE_CONFIG_PATH))


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
    with pytest.raises(AssertionError, match="report .*attention layers; came none"):
        checks.check_attention_backends(runs_of(run_with({})), CASE, ignore)


def test_a_sync_in_build_or_no_mixed_batch_is_red():
    checks.check_batches_and_syncs(runs_of(run_with({})), CASE, ignore)
    with pytest.raises(AssertionError, match="no host sync in FlashInfer.s build.. on all-TRTLLM batches; came 1"):
        checks.check_batches_and_syncs(runs_of(run_with({}, syncs=["flashinfer.py:1: synchronizing"])), CASE, ignore)
    with pytest.raises(AssertionError, match="mixed prefill . decode batches .*; came 0"):
        checks.check_batches_and_syncs(runs_of(run_with({}, batches=[(2, 0), (0, 3)])), CASE, ignore)


def test_e2e_suites_come_from_the_suite_classes():
    assert set(e2e_suites()) == {"eagle", "speculators_mtp", "draft_model"} <= set(CONFIG.suites)


def test_cases_with_one_target_share_its_baseline_run(monkeypatch):
    """CaseRuns starts one engine per distinct set of engine arguments: the smoke's cases on one target (with or
    without CUDA graphs) run the target alone once, and each speculative engine once, however often the checks ask."""
    smoke = SMOKE
    started = []
    monkeypatch.setattr(case_runs, "run_case", lambda config, case, spec: started.append((case.id, spec)) or
                        run_with({}))
    monkeypatch.setattr(case_runs, "missing_weights", lambda case: None)
    monkeypatch.setattr("spec_decode_ci.capabilities.missing", lambda requires: None)
    runs = case_runs.CaseRuns(smoke)
    every_case = [c for s in smoke.suites for c in smoke.cases(s)]
    for _ in range(2):
        for case in every_case:
            runs.get(case, False), runs.get(case, True)
    baselines = [case_id for case_id, spec in started if not spec]
    assert len(baselines) == len({(c.target, cases.eager(smoke, c)) for c in every_case}) < len(every_case), started
    assert sorted(case_id for case_id, spec in started if spec) == sorted(c.id for c in every_case)


def test_a_run_stopped_by_the_sync_check_fails_every_check_that_asks_for_it(monkeypatch):
    """A run that vLLM's own sync check stopped is a finding, an assertion naming the site, for every test
    that reads it, not a crash."""
    from spec_decode_ci.sync import SyncSite

    site = SyncSite("vllm.v1.worker.gpu.spec_decode.eagle", 158, "propose", "int(last_sampled[0].item())")
    monkeypatch.setattr(case_runs, "run_case", lambda config, case, spec: Run([], BuildLog(), {}, 1.0,
                                                                           stopped_at_sync=site))
    monkeypatch.setattr(case_runs, "missing_weights", lambda case: None)
    monkeypatch.setattr(case_runs, "not_served", lambda config, case: None)
    monkeypatch.setattr("spec_decode_ci.capabilities.missing", lambda requires: None)
    runs = case_runs.CaseRuns(SMOKE)
    for _ in range(2):  # the cached run too
        with pytest.raises(AssertionError, match=r"stopped the speculative run .*eagle.py:158 in propose"):
            checks.check_step_syncs(runs, SMOKE.cases("eagle")[0], ignore)


@pytest.fixture(scope="module")
def hand_built(tmp_path_factory):
    """The smoke's configuration with its tiny targets written, its first draft-model case, and the greedy
    continuation of each prompt its target's weights dictate."""
    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    root = tmp_path_factory.mktemp("tiny")
    config = SMOKE.with_models(write_tiny_models(root, SMOKE.tiny_models, {}, weights=True))
    case = config.cases("draft_model")[0]
    return config, case, checks.weights_continuations(config, case.target)


def test_a_target_off_its_weights_rule_is_red(hand_built):
    """The target alone must generate its hand-built weights' greedy continuation of every prompt: green on
    exactly that, red naming the prompt and token where one token differs, skipped for a real checkpoint."""
    config, case, following = hand_built

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


def test_a_greedy_divergence_names_prompt_token_and_which_run_left_the_rule(hand_built):
    """Speculative greedy output that leaves the target alone's is red, naming the first prompt and token where
    it does, both runs' tokens there and, for a hand-built target, what its weights dictate."""
    config, case, following = hand_built
    off = [list(ids) for ids in following]
    off[2][7] += 1

    def check(baseline, spec, on=config, of=case):
        runs = SimpleNamespace(config=on, get=lambda c, speculative: Run(spec if speculative else baseline,
                                                                         BuildLog(), {}, 1.0))
        checks.check_greedy_output(runs, of, ignore)

    check(following, following)
    rule = following[2][7:11]
    with pytest.raises(AssertionError, match=rf"on 1/{len(following)} prompts; prompt 2 from generated token 7: "
                                             rf"speculative \[{off[2][7]}, .*target alone \[{rule[0]}, .*, the "
                                             rf"weights' rule \[{', '.join(map(str, rule))}\]"):
        check(following, off)
    with pytest.raises(AssertionError, match=r"target alone \[\d+, .*weights' rule") as info:
        check(off, following)  # the target alone left the rule; the speculative run kept it
    assert "speculative [" + str(rule[0]) in str(info.value)
    with pytest.raises(AssertionError, match=r"prompt 0 from generated token 1: speculative \[9\], target alone "
                                             r"\[2\]$"):
        check([[1, 2]] * len(SMOKE.prompts), [[1, 9]] * len(SMOKE.prompts), SMOKE, SMOKE.cases("draft_model")[0])


def test_acceptance_below_its_reference_by_more_than_the_relative_tolerance_is_red():
    """A one-sided relative tolerance (vLLM's acceptance-length check): each position at least its reference
    less rtol; above the reference by any amount is green."""
    import dataclasses

    case = dataclasses.replace(SMOKE.cases("eagle")[0], acceptance_per_position=(0.7, 0.5, 0.3),
                               acceptance_per_position_rtol=0.05, acceptance_per_position_tolerance=0.0)

    def off(accepted):
        return checks.acceptance_off_prediction(case, Run([], BuildLog(), {"vllm:spec_decode_num_drafts": 1000}, 1.0,
                                                         accepted_per_position=accepted))

    assert off([665, 475, 285]) is None  # each exactly at its floor
    assert off([1000, 1000, 1000]) is None
    message = off([665, 474, 285])
    assert message and "position 1: 0.4740" in message and "at least 0.4750" in message and "position 0" not in message


def test_a_case_on_vllms_benchmark_prompts_skips_where_its_loader_cannot_run(monkeypatch):
    """MT-Bench prompts come from vLLM's benchmark loader, which needs ``datasets``: without it the case skips with
    that reason; the configuration's own prompts need nothing."""
    import dataclasses
    import importlib.util

    case = SMOKE.cases("eagle")[0]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else
                        real_find_spec(name, *a))
    assert case_runs.missing_prompts(case) is None
    assert "`datasets` package" in case_runs.missing_prompts(dataclasses.replace(case, prompt_set="mt_bench"))
