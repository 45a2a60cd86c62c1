"""The end-to-end checks every suite shares, each reading the runs of ``case_runs.CaseRuns``."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from spec_decode_ci.e2e.case_runs import CaseRuns
from spec_decode_ci.e2e.cases import Case, SuiteConfig, eager, hand_built_target
from spec_decode_ci.e2e.cuda_graphs import shortfall
from spec_decode_ci.e2e.engine_run import Run, prompts
from spec_decode_ci.e2e.model_runner_choice import check_ran_on_asked
from spec_decode_ci.results import (
    ACCEPTANCE_LENGTH, ACCEPTANCE_PER_POSITION, CUDA_GRAPHS, ENGINE_START_S, HOST_SYNC_SITES, HOST_SYNCS_PER_STEP_MAX,
    MIXED_BATCHES, RUNNER_PROPERTY, SPEED,
)

def record_wall_time(record_property, run: Run, name: str) -> None:
    record_property(f"{name}_wall_s", round(run.wall_s, 2))  # lands in the JUnit XML the step uploads


def speculative_run(runs: CaseRuns, case: Case, record_property) -> Run:
    """The case's speculative run, its model runner recorded (as the worker reported it) and held to the one the
    run asked for."""
    spec = runs.get(case, True)
    record_property(RUNNER_PROPERTY, spec.runner)
    check_ran_on_asked(spec.runner, spec.runner_log)
    return spec


def check_greedy_output(runs: CaseRuns, case: Case, record_property) -> None:
    baseline, spec = runs.get(case, False), speculative_run(runs, case, record_property)
    record_wall_time(record_property, baseline, "baseline")
    record_wall_time(record_property, spec, "speculative")
    record_property(ENGINE_START_S, {"speculative": round(spec.start_s, 2), "baseline": round(baseline.start_s, 2)})
    same = sum(a == b for a, b in zip(baseline.token_ids, spec.token_ids))
    fraction = same / len(baseline.token_ids)
    record_property("match_fraction", round(fraction, 3))
    assert len(spec.token_ids) == len(baseline.token_ids) == len(runs.config.prompts), (
        f"expected one output per prompt ({len(runs.config.prompts)}) from both engines of {case.id}; came "
        f"{len(spec.token_ids)} speculative, {len(baseline.token_ids)} from the target alone. Look: e2e.engine_run")
    if case.min_match_fraction >= 1.0 and spec.token_ids != baseline.token_ids:
        raise AssertionError(greedy_divergence(runs.config, case, baseline.token_ids, spec.token_ids))
    assert fraction >= case.min_match_fraction, (
        f"expected at least {case.min_match_fraction:.0%} of the prompts' greedy outputs of {case.id} to match the "
        f"target alone's; came {same}/{len(baseline.token_ids)}. Look: the rejection sampler and the drafter's "
        f"positions")


def first_difference(got: list[int], want: list[int]) -> int:
    """The first generated token where two generations differ (the shorter one's length where it is a prefix)."""
    return next((t for t, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def greedy_divergence(config: SuiteConfig, case: Case, baseline: list[list[int]], spec: list[list[int]]) -> str:
    """Where the speculative run's greedy output first leaves the target alone's: the prompt, the token, both
    runs' tokens from there and, for a hand-built target, what its weights dictate (which run left the rule)."""
    differing = [i for i, (b, s) in enumerate(zip(baseline, spec)) if b != s]
    i = differing[0]
    at = first_difference(spec[i], baseline[i])
    message = (f"speculative greedy output differs from the target alone on {len(differing)}/{len(baseline)} "
               f"prompts; prompt {i} from generated token {at}: speculative {spec[i][at:at + 4]}, target alone "
               f"{baseline[i][at:at + 4]}")
    target = hand_built_target(config, case)
    if target is not None:
        message += f", the weights' rule {weights_continuations(config, target)[i][at:at + 4]}"
    return message


def weights_continuations(config: SuiteConfig, target_dir: str) -> list[list[int]]:
    """The greedy continuation of each of the configuration's prompts (as token ids) that a hand-built target's
    weights dictate (``tiny_models.target_rule``)."""
    from spec_decode_ci.e2e.tiny_models import continuation, target_rule

    rule = target_rule(target_dir)
    return [continuation(rule, p["prompt_token_ids"], config.max_tokens) for p in prompts(config)]


def check_target_follows_its_weights(runs: CaseRuns, case: Case, record_property) -> None:
    """The target alone generates what its hand-built weights dictate (``tiny_models.target_rule``): a bug in
    vLLM's attention, positions or KV cache that the speculative run shares with the target alone shows here,
    even where comparing the two runs does not."""
    target = hand_built_target(runs.config, case)
    if target is None:
        pytest.skip(f"{case.target} is not a hand-built tiny model: no greedy rule is known from its weights")
    expected = weights_continuations(runs.config, target)
    generated = runs.get(case, False).token_ids
    wrong = [i for i, (got, want) in enumerate(zip(generated, expected)) if got != want]
    record_property("prompts_following_weights", len(expected) - len(wrong))
    assert len(generated) == len(expected), f"{len(generated)} outputs for {len(expected)} prompts"
    if wrong:
        i = wrong[0]
        at = first_difference(generated[i], expected[i])
        raise AssertionError(
            f"the target alone left its weights' greedy rule on {len(wrong)}/{len(expected)} prompts; prompt {i} "
            f"from generated token {at}: got {generated[i][at:at + 4]}, the rule "
            f"gives {expected[i][at:at + 4]}")


def check_acceptance(runs: CaseRuns, case: Case, record_property) -> None:
    """Acceptance above the case's floors and, where the case predicts it, per draft position as predicted."""
    spec = speculative_run(runs, case, record_property)
    record_property(ACCEPTANCE_LENGTH, round(spec.acceptance_length, 3))
    record_property("acceptance_rate", round(spec.acceptance_rate, 3))
    record_property(ACCEPTANCE_PER_POSITION, {"measured": [round(r, 4) for r in spec.acceptance_per_position],
                                              "expected": list(case.acceptance_per_position or []) or None})
    assert spec.counters.get("vllm:spec_decode_num_drafts", 0) > 0, (
        f"expected vLLM to count drafting steps (vllm:spec_decode_num_drafts > 0) for {case.id}; came its counters "
        f"{spec.counters}. Look: whether the engine speculated at all (its speculative_config, the drafter's load)")
    assert spec.acceptance_length >= case.acceptance_length_floor, (
        f"expected an acceptance length of at least {case.acceptance_length_floor} accepted drafts per drafting step "
        f"for {case.id}; came {spec.acceptance_length:.3f} (vLLM's counters {spec.counters}). Look: the drafter "
        f"and the rejection sampler of the model runner the case ran on")
    if case.min_acceptance_rate is not None:
        assert spec.acceptance_rate >= case.min_acceptance_rate, (
            f"expected at least {case.min_acceptance_rate:.0%} of draft tokens accepted for {case.id}; came "
            f"{spec.acceptance_rate:.1%} (vLLM's counters {spec.counters})")
    if case.acceptance_per_position is not None:
        off = acceptance_off_prediction(case, spec)
        assert off is None, (
            f"expected {case.id}'s acceptance per draft position as predicted {list(case.acceptance_per_position)}; "
            f"came {off}. Look: the drafter's inputs (hidden states, positions, KV slots) and the rejection sampler")


def acceptance_off_prediction(case: Case, run: Run) -> str | None:
    """Where vLLM's accepted drafts per position leave the case's prediction (beyond its tolerance; with none,
    by a single draft), or fall below its reference by more than its one-sided relative tolerance; or None."""
    predicted = case.acceptance_per_position
    drafts = run.counters.get("vllm:spec_decode_num_drafts", 0)
    measured = run.accepted_per_position
    if len(measured) != len(predicted):
        return (f"vLLM counted accepted drafts at {len(measured)} positions ({measured}); the case predicts "
                f"{len(predicted)} (num_speculative_tokens {case.num_speculative_tokens})")
    rtol = case.acceptance_per_position_rtol
    if rtol is not None:
        off = [f"position {i}: {n / drafts:.4f} of {drafts} drafting steps accepted, reference {want}, at least "
               f"{want * (1 - rtol):.4f}" for i, (n, want) in enumerate(zip(measured, predicted))
               if want > 0 and n < want * (1 - rtol) * drafts]
        tolerance = f"one-sided rtol {rtol}"
    else:
        allowed = max(case.acceptance_per_position_tolerance * drafts, 0.5)
        off = [f"position {i}: {n} of {drafts} drafting steps accepted ({n / drafts:.3f}), predicted {want}"
               for i, (n, want) in enumerate(zip(measured, predicted)) if abs(n - want * drafts) > allowed]
        tolerance = f"tolerance {case.acceptance_per_position_tolerance}"
    if not off:
        return None
    return f"acceptance per draft position off the prediction ({tolerance}): " + "; ".join(off)


def check_batches_and_syncs(runs: CaseRuns, case: Case, record_property) -> None:
    spec = speculative_run(runs, case, record_property)
    builds = spec.builds
    record_property("builds", len(builds.batches))
    record_property(MIXED_BATCHES, builds.mixed_batches)
    record_property("builder_mixed_batches", builds.builder_mixed_batches)
    record_property("host_syncs_in_build", len(builds.syncs))
    floor = runs.config.engine.min_mixed_batches
    assert builds.mixed_batches >= floor, (
        f"expected at least {floor} mixed prefill + decode batches in {case.id}'s speculative run; came "
        f"{builds.mixed_batches} in {len(builds.batches)} builds. Look: the engine's token budget and chunked prefill "
        f"(cases engine settings)")
    if runs.config.engine.all_trtllm:
        assert builds.syncs == [], (
            f"expected no host sync in FlashInfer's build() on all-TRTLLM batches; came {len(builds.syncs)}. Look "
            f"at:\n" + "\n".join(builds.syncs))
    else:  # a native phase needs seq_lens on the host: one copy per build, no more
        assert max(builds.syncs_per_build, default=0) <= 1, (
            f"expected at most one host sync per FlashInfer build() (native phases copy seq_lens once); came "
            f"{max(builds.syncs_per_build)}. Look at:\n" + "\n".join(builds.syncs))


def check_step_syncs(runs: CaseRuns, case: Case, record_property) -> None:
    """No host sync anywhere in a speculative step (target forward, rejection, the drafter's propose, every
    metadata build) but at the allowed sites of ``step_syncs.ALLOWED_SYNCS``; the others are named file:line."""
    spec = speculative_run(runs, case, record_property)
    per_step, all_trtllm = spec.steps.syncs_per_step, runs.config.engine.all_trtllm
    record_property("steps", len(per_step))
    record_property(HOST_SYNCS_PER_STEP_MAX, max(per_step, default=0))
    record_property("host_syncs_per_step_mean", round(sum(per_step) / len(per_step), 3) if per_step else 0)
    record_property(HOST_SYNC_SITES, {str(site): n for site, n in spec.steps.sites().most_common()})
    assert per_step, (f"expected {case.id}'s engine steps observed; came none: the worker's step methods were not "
                      f"called. Look: e2e/step_syncs.py, which methods of vLLM's GPU worker it wraps")
    not_allowed = spec.steps.not_allowed(all_trtllm)
    assert not not_allowed, (
        f"host syncs in the speculative step at {len(not_allowed)} site(s) not allowed "
        f"(spec_decode_ci/e2e/step_syncs.py, ALLOWED_SYNCS):\n"
        + "\n".join(f"  {site}  ({n} syncs in {len(per_step)} steps)" for site, n in not_allowed.most_common()))


def check_attention_backends(runs: CaseRuns, case: Case, record_property) -> None:
    """Every attention layer, the drafter's included, runs the configured backend: a drafter that selects
    another one (vLLM picks the drafter's backend itself unless the speculative config pins it) would leave
    its metadata builds unobserved."""
    spec = speculative_run(runs, case, record_property)
    wanted = runs.config.engine.attention_backend
    elsewhere = {layer: backend for layer, backend in spec.attention_backends.items() if backend != wanted}
    record_property("attention_layers", len(spec.attention_backends))
    record_property("layers_not_on_" + wanted.lower(), len(elsewhere))
    assert spec.attention_backends, (f"expected the worker to report {case.id}'s attention layers; came none. Look: "
                                     f"e2e.engine_run.attention_backends_of and the model runner's attn_groups")
    assert not elsewhere, (f"expected every layer of {case.id} on {wanted}; came {len(elsewhere)} elsewhere: "
                           f"{elsewhere}. Look: the speculative config's attention_backend (cases.engine_kwargs)")


def cuda_graph_floor(backend: str) -> tuple[str | None, str]:
    """(the least CUDA-graph mode the matrix asks of a target's spec-decode batches with ``backend`` on this machine,
    or None; where that was read, for skip reasons)."""
    from spec_decode_ci import capabilities

    machine = capabilities.this_machine()
    device = capabilities.device_record(machine)
    if device is None:
        return None, f"this machine is no device of the hardware matrix ({machine.how})"
    floor = dict(device.spec_decode_cuda_graphs).get(backend)
    return floor, f"device {device.name}: spec_decode_cuda_graphs has no {backend}" if floor is None else ""


def check_cuda_graph_mode(runs: CaseRuns, case: Case, record_property) -> None:
    """The CUDA-graph mode the speculative engine dispatched for the target's uniform spec-decode batches (1 + k
    query tokens a request) is at least what the hardware matrix asks of this device and backend; an eager case
    dispatches no graph at all."""
    spec = speculative_run(runs, case, record_property)
    query_len = 1 + case.num_speculative_tokens
    figure = spec.graphs.figure(query_len)
    if eager(runs.config, case):
        record_property(CUDA_GRAPHS, {**figure, "expected": "NONE"})
        graphed = {d.mode for d in spec.graphs.dispatches} - {"NONE"}
        assert spec.graphs.resolved == "NONE" and not graphed, (
            f"expected an eager case (enforce_eager) to run no CUDA graph; came resolved mode {spec.graphs.resolved}, "
            f"dispatched {figure['dispatched']}. Look: how the case's engine is configured (cases.engine_kwargs)")
        return
    floor, why = cuda_graph_floor(runs.config.engine.attention_backend)
    record_property(CUDA_GRAPHS, {**figure, "expected": floor})
    if floor is None:
        pytest.skip(f"no CUDA-graph expectation for spec decode here: {why}")
    problem = shortfall(spec.graphs, query_len, floor)
    assert problem is None, f"{case.id}: {problem}"


def check_speed(runs: CaseRuns, case: Case, record_property, workdir: Path) -> None:
    """Both engines of the case as vLLM runs by default (own engine process, CUDA graphs, async scheduling), timed
    after warm-up without instrumentation (``e2e.speed``): tokens/s, time per output token, GPU idle share and the
    speedup recorded; the speedup at least the case's floor where it has one."""
    if eager(runs.config, case):
        pytest.skip("speed is measured as vLLM runs by default, with CUDA graphs and torch.compile; this is the "
                    "suite's eager case")
    result = runs.speed(case, workdir)
    record_property(SPEED, result.figure(case.min_speedup))
    if case.min_speedup is not None:
        spec, target = result.speculative, result.target
        assert result.speedup >= case.min_speedup, (
            f"expected {case.id}'s speculative engine at least {case.min_speedup:g}x the target alone's output "
            f"tokens/s; came {result.speedup:.3f}x ({spec.median:.1f} vs {target.median:.1f} tokens/s, GPU idle "
            f"{spec.gpu_idle_share} vs {target.gpu_idle_share}, TPOT {spec.tpot_ms} vs {target.tpot_ms} ms). Look: "
            f"the CUDA-graph mode the engine ran (test_cuda_graph_mode_at_least_the_matrixs), its acceptance, host "
            f"syncs in its step; rerun: {shlex.join(result.command)}")


class SuiteTests:
    """The e2e tests of one suite; a module subclasses it with ``suite = "<name>"`` and gets one test per
    check and case (``case`` is parametrized from spec_decode_ci/e2e/cases.yaml, ``runs`` built, by the pytest plugin)."""

    suite: str
    pytestmark = [pytest.mark.e2e]

    def test_greedy_output_matches_target(self, runs, case, record_property):
        check_greedy_output(runs, case, record_property)

    def test_target_follows_its_weights(self, runs, case, record_property):
        check_target_follows_its_weights(runs, case, record_property)

    def test_acceptance(self, runs, case, record_property):
        check_acceptance(runs, case, record_property)

    def test_mixed_batches_without_host_sync(self, runs, case, record_property):
        check_batches_and_syncs(runs, case, record_property)

    def test_no_host_sync_in_the_speculative_step(self, runs, case, record_property):
        check_step_syncs(runs, case, record_property)

    def test_every_layer_on_the_configured_backend(self, runs, case, record_property):
        check_attention_backends(runs, case, record_property)

    def test_cuda_graph_mode_at_least_the_matrixs(self, runs, case, record_property):
        check_cuda_graph_mode(runs, case, record_property)

    def test_speed_as_vllm_runs_by_default(self, runs, case, record_property, tmp_path):
        check_speed(runs, case, record_property, tmp_path)
