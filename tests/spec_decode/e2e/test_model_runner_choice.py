"""The asked model runner: read from SPEC_DECODE_E2E_RUNNER (a bad value is a located error), handed to vLLM's own
switch, held against what vLLM picks for each smoke case by its own rules (a case the asked runner does not
serve skips with vLLM's reason), and a case whose engine ran another runner fails naming what vLLM logged.
Asked of vLLM's engine configuration on the CPU (emulated Blackwell)."""

from __future__ import annotations

import pytest

from spec_decode_ci import compat
from spec_decode_ci.e2e import model_runner_choice as runner_choice
from spec_decode_ci.e2e.gpu_breaks import smoke_with_tiny_configs
from spec_decode_ci.emulation import emulated_platform

pytestmark = pytest.mark.e2e_offline


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return smoke_with_tiny_configs(tmp_path_factory.mktemp("tiny-models"))


def smoke_cases(smoke):
    return list(smoke.all_cases())


def test_a_bad_runner_name_is_a_located_error(monkeypatch):
    monkeypatch.setenv(runner_choice.RUNNER_ENV, "v2")
    with pytest.raises(ValueError, match=r"SPEC_DECODE_E2E_RUNNER='v2': expected one of V1, V2"):
        runner_choice.asked_runner()
    monkeypatch.delenv(runner_choice.RUNNER_ENV)
    assert runner_choice.asked_runner() is None and runner_choice.engine_env() == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.mark.parametrize("asked", ["V1", "V2"])
def test_vllm_runs_each_case_on_the_asked_runner_or_the_case_skips(asked, smoke, monkeypatch):
    """Asked for a runner, vLLM's configuration names it for every case the harness does not skip; a skip names
    the runner vLLM picks by its own rules instead."""
    monkeypatch.setenv(runner_choice.RUNNER_ENV, asked)
    if compat.module_origin(runner_choice.RUNNERS[asked]) is None:
        pytest.skip(f"this vLLM does not ship model runner {asked}")
    with emulated_platform():
        for case in smoke_cases(smoke):
            picked, _ = runner_choice.picked_by_vllm(smoke, case)
            reason = runner_choice.not_served(smoke, case)
            if reason is None:
                assert compat.runner_name(runner_choice.engine_runner(smoke, case)) == asked, case.id
                assert asked == "V1" or picked == "V2", case.id
            else:
                assert asked == "V2" and picked == "V1" and f"runs it on {picked}" in reason, (case.id, reason)


def test_vllms_own_pick_is_taken_with_its_switch_unset(smoke, monkeypatch):
    """The pick is vLLM's default whatever the run asks: the same asked for V1, for V2 or nothing."""
    with emulated_platform():
        picks = {}
        for asked in ("V1", "V2", ""):
            monkeypatch.setenv(runner_choice.RUNNER_ENV, asked)
            runner_choice._PICKED.clear()
            picks[asked] = [runner_choice.picked_by_vllm(smoke, c)[0] for c in smoke_cases(smoke)]
        monkeypatch.delenv(runner_choice.RUNNER_ENV)
        assert picks["V1"] == picks["V2"] == picks[""] == [
            compat.runner_name(runner_choice.engine_runner(smoke, c)) for c in smoke_cases(smoke)]


def test_an_engine_on_another_runner_than_asked_fails_with_vllms_words(monkeypatch):
    monkeypatch.setenv(runner_choice.RUNNER_ENV, "V2")
    logged = ["Model Runner V2 does not yet support speculative method 'draft_model'; using the V1 model runner"]
    with pytest.raises(AssertionError, match=r"=V2 \(VLLM_USE_V2_MODEL_RUNNER=1\) but the engine ran on V1; "
                                             r"vLLM logged: Model Runner V2 does not yet support"):
        runner_choice.check_ran_on_asked("V1", logged)
    runner_choice.check_ran_on_asked("V2", [])
    monkeypatch.delenv(runner_choice.RUNNER_ENV)
    runner_choice.check_ran_on_asked("V1", [])  # nothing asked: any runner
