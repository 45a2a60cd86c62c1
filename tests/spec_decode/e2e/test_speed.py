"""The speed check's parts that need no GPU: the child's command line reproduces the case's engines, vLLM's time per
output token is read between two readings of its histogram, and the check's skip, figure and floor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spec_decode_ci.e2e import cases, speed
from spec_decode_ci.e2e.checks import check_speed
from spec_decode_ci.results import SPEED

pytestmark = pytest.mark.e2e_offline


def smoke_case(root: Path, case_id: str) -> tuple[cases.SuiteConfig, cases.Case]:
    """A case of the GPU smoke with its tiny models' directories under ``root`` (configs only: no engine starts)."""
    from spec_decode_ci.e2e.tiny_models import write_tiny_models

    smoke = cases.parse(cases.SMOKE_CONFIG_PATH)
    write_tiny_models(root, smoke.tiny_models, smoke.tiny_heads, weights=False)
    config = speed.with_tiny_models(smoke, root)
    return config, next(c for c in config.all_cases() if c.id == case_id)


@pytest.mark.parametrize("case_id", ["tiny-llama-eagle3", "tiny-mimo-mtp", "tiny-llama-self"])
def test_the_childs_command_line_names_the_same_engines(tmp_path, case_id):
    """The child reads back from its command line the very engine arguments the parent's case has (target alone and
    speculative), its tiny models included, so the printed command reruns what the check measured."""
    config, case = smoke_case(tmp_path / "tiny", case_id)
    argv = speed.command(cases.SMOKE_CONFIG_PATH, config, case, tmp_path / "speed.json", runner="V2")
    assert argv[:3] == [sys.executable, "-m", "spec_decode_ci.e2e.speed"]
    assert argv[argv.index("--tiny-models") + 1] == str(tmp_path / "tiny") and "--runner" in argv
    child_config, child_case = speed.case_of(speed.parser().parse_args(argv[3:]))
    for speculative in (False, True):
        assert cases.engine_kwargs(child_config, child_case, speculative) == \
            cases.engine_kwargs(config, case, speculative), f"{case_id}, speculative={speculative}"


def test_a_case_not_in_the_config_is_one_line(tmp_path):
    args = speed.parser().parse_args(["--config", str(cases.SMOKE_CONFIG_PATH), "--suite", "eagle", "--case",
                                      "tiny-llama-eagle9", "--output", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit) as raised:
        speed.case_of(args)
    assert str(raised.value) == ("speed: no case 'tiny-llama-eagle9' in suite 'eagle' (cases: tiny-llama-eagle3, "
                                 "tiny-llama-eagle1)")


def test_time_per_output_token_is_vllms_histogram_between_two_readings():
    """The mean of what vLLM's per-request TPOT histogram gained over the timed runs, summed over engines; None
    where the release reports no such histogram or nothing was observed."""
    reader = pytest.importorskip("vllm.v1.metrics.reader")

    def tpot(count, total, engine="0"):
        return reader.Histogram(name="vllm:request_time_per_output_token_seconds", labels={"engine": engine},
                                count=count, sum=total, buckets={})

    other = reader.Counter(name="vllm:spec_decode_num_drafts", labels={}, value=5)
    before = speed.histogram_totals([other, tpot(8, 0.4), tpot(2, 0.1, "1")])
    after = speed.histogram_totals([other, tpot(16, 0.6), tpot(4, 0.2, "1")])
    assert before == (0.5, 10) and after == pytest.approx((0.8, 20))
    assert speed.mean_between(before, after) == pytest.approx(0.03)
    assert speed.mean_between(before, before) is None
    assert speed.histogram_totals([other]) is None


def test_without_nvml_the_idle_share_is_left_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the bindings fail to import, as where no driver is
    monkeypatch.setitem(sys.modules, "vllm.third_party.pynvml", None)
    busy = speed.GpuBusy()
    busy.start()
    busy.stop()
    assert busy.unavailable and busy.idle_share is None


class MeasuredRuns:
    """Stands in for ``CaseRuns``: the speed a child would have measured, without starting engines."""

    def __init__(self, config, spec_tps: float, target_tps: float):
        self.config = config
        self.result = speed.SpeedResult(
            speed.EngineSpeed([spec_tps] * 3, 384, 2.5, 0.1, 30.0),
            speed.EngineSpeed([target_tps] * 3, 384, 4.0, 0.4, 20.0), ["python", "-m", "spec_decode_ci.e2e.speed"])

    def speed(self, case, workdir):
        return self.result


def recorded(runs, case, tmp_path) -> dict:
    properties = {}
    check_speed(runs, case, lambda k, v: properties.__setitem__(k, v), tmp_path)
    return properties


def test_the_speed_figure_and_the_floor(tmp_path):
    """The figure holds both engines and the speedup; under the case's floor the check fails saying what was
    expected, what came and the command that reruns it."""
    config, case = smoke_case(tmp_path / "tiny", "tiny-llama-eagle3")
    figure = recorded(MeasuredRuns(config, 600.0, 300.0), case.__class__(**{**vars(case), "min_speedup": 1.5}),
                      tmp_path)[SPEED]
    assert figure["speedup"] == 2.0 and figure["floor"] == 1.5
    assert figure["speculative"]["tokens_per_s"] == 600.0 and figure["target"]["gpu_idle_share"] == 0.4
    with pytest.raises(AssertionError) as raised:
        recorded(MeasuredRuns(config, 330.0, 300.0), case.__class__(**{**vars(case), "min_speedup": 1.5}), tmp_path)
    message = str(raised.value)
    assert "expected tiny-llama-eagle3's speculative engine at least 1.5x" in message
    assert "came 1.100x (330.0 vs 300.0 tokens/s" in message and "rerun: python -m spec_decode_ci.e2e.speed" in message


def test_an_eager_case_is_not_timed(tmp_path):
    config, case = smoke_case(tmp_path / "tiny", "tiny-llama-eagle1")
    with pytest.raises(pytest.skip.Exception, match="eager case"):
        recorded(MeasuredRuns(config, 600.0, 300.0), case, tmp_path)


def case_runs_here(config, monkeypatch):
    """``CaseRuns`` of ``config`` on this machine: past its GPU capability check and the weights' reachability
    (no engine starts here; the tests replace what would start one)."""
    from spec_decode_ci.e2e import case_runs

    monkeypatch.setattr("spec_decode_ci.capabilities.missing", lambda requires: None)
    runs = case_runs.CaseRuns(config)
    monkeypatch.setattr(runs, "_skip_unless_runnable", lambda case: None)
    return runs


def test_an_engine_that_broke_is_not_started_again(tmp_path, monkeypatch):
    """The first test of an engine that breaks sees vLLM's error; every later test of that engine fails at once
    with the reason, instead of starting it again (seen on an H100: each of a case's seven tests restarted a
    failing engine with CUDA graphs, and the suite ran out of its time)."""
    from spec_decode_ci.e2e import case_runs

    config, case = smoke_case(tmp_path / "tiny", "tiny-llama-eagle3")
    starts = []

    def broken(config, case, speculative):
        starts.append(speculative)
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    monkeypatch.setattr(case_runs, "run_case", broken)
    runs = case_runs_here(config, monkeypatch)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        runs.get(case, True)
    with pytest.raises(pytest.fail.Exception, match="speculative engine of tiny-llama-eagle3 broke in an earlier "
                                                    "test of this session: RuntimeError: CUDA error: an illegal"):
        runs.get(case, True)
    assert starts == [True], f"expected the broken engine started once; came {len(starts)} starts"


def test_the_printed_command_writes_the_tiny_models_it_needs(tmp_path):
    """Rerun after the suite removed its tiny models: the child writes them again (weights included) where it
    is told they live."""
    config = speed.with_tiny_models(cases.parse(cases.SMOKE_CONFIG_PATH), tmp_path / "gone")
    case = next(c for c in config.all_cases() if c.id == "tiny-llama-eagle3")
    for checkpoint in case.checkpoints:
        assert (Path(checkpoint) / "model.safetensors").exists(), f"expected weights under {checkpoint}; came none"


def test_cases_with_the_same_engines_share_one_speed_run(tmp_path, monkeypatch):
    """A case that differs from another only in its prompts or floors (the nightly's MT-Bench variants) starts no
    further engines for its speed."""
    import dataclasses

    from spec_decode_ci.e2e import case_runs

    config, case = smoke_case(tmp_path / "tiny", "tiny-llama-eagle3")
    measured = []
    monkeypatch.setattr(case_runs, "measure", lambda config, case, workdir, runner: measured.append(case.id) or "m")
    runs = case_runs_here(config, monkeypatch)
    variant = dataclasses.replace(case, id="tiny-llama-eagle3-other-prompts", prompt_set="mt_bench", min_speedup=1.0)
    other = next(c for c in config.all_cases() if c.id == "tiny-llama-self")
    for c in (case, variant, other):
        runs.speed(c, tmp_path)
    assert measured == ["tiny-llama-eagle3", "tiny-llama-self"], f"expected two speed runs; came {measured}"
