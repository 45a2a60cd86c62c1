"""Runs one case through vLLM's real ``LLM`` and records what the e2e checks need.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the FlashInfer metadata
builder and the worker's steps can be observed: every ``build()`` is recorded (prefills, decodes), and every
engine step (``step_syncs``) runs under CUDA's sync debug mode in "warn", whose warnings are collected as host
syncs with their call sites. Where vLLM has its own sync check
(``vllm.utils.gpu_sync_debug``), it is switched to "error" too.
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator
from unittest import mock

from spec_decode_ci import compat
from spec_decode_ci.e2e.cases import Case, SuiteConfig, engine_kwargs
from spec_decode_ci.e2e.cuda_graphs import GraphLog, engine_graphs_of, logged_mode, observed_dispatches
from spec_decode_ci.e2e.model_runner_choice import engine_env, runner_log
from spec_decode_ci.e2e.step_syncs import StepLog, observed_steps
from spec_decode_ci.sync import SyncSite, cuda_sync_warnings, refused_sync_site


@dataclass
class BuildLog:
    # (prefill chunks, decode steps) per build as scheduled: a request with more query tokens than a decode
    # step has (1 + k) is prefilling. Without TRTLLM decode (Hopper) the builder itself calls every speculative
    # decode step a prefill; ``builder_batches`` keeps its (num_prefills, num_decodes).
    batches: list[tuple[int, int]] = field(default_factory=list)
    syncs: list[str] = field(default_factory=list)
    syncs_per_build: list[int] = field(default_factory=list)
    builder_batches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def mixed_batches(self) -> int:
        return sum(1 for p, d in self.batches if p and d)

    @property
    def builder_mixed_batches(self) -> int:
        return sum(1 for p, d in self.builder_batches if p and d)


def scheduled_phases(common_attn_metadata, decode_max_query_len: int) -> tuple[int, int]:
    """(prefill chunks, decode steps) of a batch from its host query offsets; zero-length (padded) requests
    are neither."""
    bounds = common_attn_metadata.query_start_loc_cpu[:common_attn_metadata.num_reqs + 1].tolist()
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    return sum(q > decode_max_query_len for q in lengths), sum(0 < q <= decode_max_query_len for q in lengths)


@dataclass
class Run:
    token_ids: list[list[int]]
    builds: BuildLog
    counters: dict[str, float]
    wall_s: float
    attention_backends: dict[str, str] = field(default_factory=dict)  # layer -> backend, target and drafter
    steps: StepLog = field(default_factory=StepLog)  # host syncs of each engine step, with their call sites
    start_s: float = 0.0  # LLM() until it returned: the engine's start
    runner: str | None = None  # the GPU model runner the engine ran on, as the worker reports it (compat.runner_name)
    accepted_per_position: list[int] = field(default_factory=list)  # drafts accepted at each draft position
    runner_log: list[str] = field(default_factory=list)  # what vLLM logged of its model runner at the start
    # Where sync debug mode "error" (vLLM's own sync check) refused a host sync and so stopped generate()
    stopped_at_sync: SyncSite | None = None
    graphs: GraphLog = field(default_factory=GraphLog)  # the CUDA-graph mode resolved and dispatched per batch

    @property
    def acceptance_per_position(self) -> list[float]:
        """The fraction of drafting steps whose draft at each position was accepted (vLLM's per-position
        counters over its drafts)."""
        drafts = self.counters.get("vllm:spec_decode_num_drafts", 0)
        return [n / drafts if drafts else 0.0 for n in self.accepted_per_position]

    @property
    def acceptance_length(self) -> float:
        """Accepted draft tokens per drafting step (0..k)."""
        drafts = self.counters.get("vllm:spec_decode_num_drafts", 0)
        return self.counters.get("vllm:spec_decode_num_accepted_tokens", 0) / drafts if drafts else 0.0

    @property
    def acceptance_rate(self) -> float:
        proposed = self.counters.get("vllm:spec_decode_num_draft_tokens", 0)
        return self.counters.get("vllm:spec_decode_num_accepted_tokens", 0) / proposed if proposed else 0.0


@contextmanager
def observed_builds(log: BuildLog, decode_max_query_len: int = 1) -> Iterator[None]:
    """Every FlashInfer ``build()`` recorded in ``log``; decode steps have at most ``decode_max_query_len``
    query tokens (1 + k when speculating)."""
    import torch
    import vllm.v1.attention.backends.flashinfer as fi_backend

    original = fi_backend.FlashInferMetadataBuilder.build

    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():  # capture: nothing real to observe
            return original(self, common_prefix_len, common_attn_metadata, *args, **kwargs)
        phases = scheduled_phases(common_attn_metadata, decode_max_query_len)  # host offsets, read before build
        with cuda_sync_warnings() as synced:
            metadata = original(self, common_prefix_len, common_attn_metadata, *args, **kwargs)
        log.syncs += synced
        log.syncs_per_build.append(len(synced))
        log.batches.append(phases)
        log.builder_batches.append((metadata.num_prefills, metadata.num_decodes))
        return metadata

    with mock.patch.object(fi_backend.FlashInferMetadataBuilder, "build", build):
        yield


def prompts(config: SuiteConfig) -> list:
    """Text prompts, or (no tokenizer) token ids from their bytes: same lengths and variety, any vocabulary."""
    if not config.engine.skip_tokenizer_init:
        return list(config.prompts)
    from vllm.inputs import TokensPrompt

    return [TokensPrompt(prompt_token_ids=[3 + b % 1000 for b in p.encode()]) for p in config.prompts]


# vLLM's acceptance-length prompts (tests/v1/spec_decode/test_acceptance_length.py), on which its reference values
# per draft position are measured.
MT_BENCH = {"dataset_path": "philschmid/mt-bench", "num_prompts": 80, "seed": 42, "output_len": 256}


def mt_bench_prompts(tokenizer) -> list:
    """MT-Bench's prompts as vLLM's acceptance-length test makes them: vLLM's own benchmark loader (every argument
    at this vLLM's default, then the test's), its chat template applied, as token ids."""
    import argparse

    from vllm.benchmarks.datasets import add_dataset_parser, get_samples
    from vllm.inputs import TokensPrompt

    parser = argparse.ArgumentParser(add_help=False)
    add_dataset_parser(parser)
    args = parser.parse_args([])
    n = MT_BENCH["output_len"]
    vars(args).update(
        dataset_name="hf", dataset_path=MT_BENCH["dataset_path"], num_prompts=MT_BENCH["num_prompts"],
        seed=MT_BENCH["seed"], no_oversample=False, endpoint_type="openai-chat", input_len=None, output_len=n,
        sharegpt_output_len=n, hf_name=None, hf_split="train", hf_subset=None, hf_output_len=n, no_stream=True,
        disable_shuffle=False, skip_chat_template=False, trust_remote_code=False, enable_multimodal_chat=False,
        request_id_prefix="")
    return [TokensPrompt(prompt_token_ids=tokenizer.encode(sample.prompt, add_special_tokens=False))
            for sample in get_samples(args, tokenizer)]


def case_prompts(config: SuiteConfig, case: Case, llm) -> tuple[list, dict[str, Any]]:
    """The prompts ``case`` runs and its sampling (beside greedy): the configuration's, or vLLM's
    acceptance-length prompts with their output length and EOS honoured."""
    if case.prompt_set == "mt_bench":
        return mt_bench_prompts(llm.get_tokenizer()), {"max_tokens": MT_BENCH["output_len"], "ignore_eos": False}
    return prompts(config), {"max_tokens": config.max_tokens, "ignore_eos": True}


def attention_backends_of(worker) -> dict[str, str]:
    """On a worker: the attention backend of every layer it runs, the drafter's included (its attention groups)."""
    return {layer: group.backend.get_name() for groups in worker.model_runner.attn_groups for group in groups
            for layer in group.layer_names}


PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"  # a Vector: one count per draft position


def _counters(llm) -> tuple[dict[str, float], list[int]]:
    """vLLM's spec-decode counters, and its accepted drafts per position, summed over engines."""
    totals: dict[str, float] = {}
    per_position: list[int] = []
    for metric in llm.get_metrics():
        value = getattr(metric, "value", None)
        if metric.name == PER_POSITION:
            values = list(metric.values)
            per_position = [a + b for a, b in zip(per_position, values)] if per_position else values
        elif isinstance(value, (int, float)) and metric.name.startswith("vllm:spec_decode"):
            totals[metric.name] = totals.get(metric.name, 0) + value
    return totals, per_position


def model_runner_of(worker) -> str:
    """On a worker: the module of the GPU model runner it runs (the first of its classes that is vLLM's runner)."""
    runners = (compat.V1_RUNNER, compat.V2_RUNNER)
    return next((c.__module__ for c in type(worker.model_runner).__mro__ if c.__module__ in runners),
                type(worker.model_runner).__module__)


def _free_gpu_memory() -> None:
    """After an engine ended: its GPU memory back for the next. Dynamo's caches hold the compiled model, and with it
    the memory pool of its captured CUDA graphs, past the engine (seen on an H100: with graphs on, each in-process
    engine kept its whole share, and the fourth of a suite found 7 of 79 GiB free)."""
    import torch
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    torch._dynamo.reset()
    gc.collect()
    cleanup_dist_env_and_memory()


def run_case(config: SuiteConfig, case: Case, speculative: bool) -> Run:
    from vllm import LLM, SamplingParams

    log, steps, graphs = BuildLog(), StepLog(), GraphLog()
    start = time.perf_counter()
    with ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, engine_env()))  # the caller's is restored after
        stack.enter_context(observed_builds(log, 1 + case.num_speculative_tokens if speculative else 1))
        stack.enter_context(compat.vllm_sync_check_as_errors())  # vLLM's own check too, where it has one
        with runner_log() as runner_logged, logged_mode() as graphs.logged:
            llm = LLM(**engine_kwargs(config, case, speculative), disable_log_stats=False)
        started = time.perf_counter() - start
        stack.enter_context(observed_steps(steps))  # the steps of generate(), not the engine's warm-up
        stack.enter_context(observed_dispatches(graphs))  # nor its graph captures
        tokens_only = config.engine.skip_tokenizer_init
        inputs, sampling = case_prompts(config, case, llm)
        params = SamplingParams(temperature=0.0, detokenize=not tokens_only, **sampling)
        stopped, outputs = None, []
        try:
            outputs = llm.generate(inputs, params, use_tqdm=False)
        except RuntimeError as error:
            stopped = refused_sync_site(error)  # the engine stopped mid-step: a finding, not a crash
            if stopped is None:
                raise
        counters, per_position, backends, runner = {}, [], {}, None
        if stopped is None:
            counters, per_position = _counters(llm) if speculative else ({}, [])
            backends = {k: v for worker in llm.collective_rpc(attention_backends_of) for k, v in worker.items()}
            runner = compat.runner_name(llm.collective_rpc(model_runner_of)[0])
            for name, value in llm.collective_rpc(engine_graphs_of)[0].items():
                setattr(graphs, name, value)
    wall = time.perf_counter() - start
    token_ids = [list(o.outputs[0].token_ids) for o in outputs]
    shutdown = getattr(getattr(llm.llm_engine, "engine_core", None), "shutdown", None)
    if shutdown is not None:
        shutdown()  # the engine core's executor and its workers, as LLM's own teardown does
    del llm, outputs
    _free_gpu_memory()  # the next engine of the module needs the memory
    return Run(token_ids, log, counters, wall, backends, steps, started, runner, per_position, runner_logged,
               stopped_at_sync=stopped, graphs=graphs)
