"""The end-to-end cases, read from cases.yaml (package data) with the generator's located-error readers."""

from __future__ import annotations

import os
import dataclasses
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from spec_decode_ci import compat
from spec_decode_ci.generator.load import join, read_document
from spec_decode_ci.generator.readers import Section, boolean, integer, number, one_of, section, text, text_list
from spec_decode_ci.e2e.tiny_models import HEAD_WRITERS
from spec_decode_ci.tiny_configs import FAMILIES

CONFIG_PATH = Path(__file__).resolve().parent / "cases.yaml"
SMOKE_CONFIG_PATH = CONFIG_PATH.with_name("cases.h200_smoke.yaml")  # tiny models, any single GPU
# Another suite configuration (e.g. tiny hand-built models on a smoke machine), same format: a path, or the
# name of a configuration shipped beside cases.yaml.
CONFIG_ENV = "SPEC_DECODE_E2E_CONFIG"
METHODS = ("eagle", "eagle3", "mtp", "draft_model")
# The prompts a case runs: the configuration's (its `prompts` and `sampling`), or vLLM's acceptance-length
# prompts (tests/v1/spec_decode/test_acceptance_length.py: MT-Bench, 80 prompts, 256 output tokens, EOS honoured),
# which vLLM's per-position reference values are measured on.
PROMPT_SETS = ("config", "mt_bench")


fraction = number(0, 1)
non_negative = number(0)


def fractions(doc, path: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise doc.error(path, "expected a non-empty list of fractions (one per draft position)")
    return tuple(fraction(doc, join(path, i), v) for i, v in enumerate(value))


@dataclass(frozen=True)
class EngineSettings:
    attention_backend: str
    use_trtllm_attention: bool
    async_scheduling: bool
    enable_chunked_prefill: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_utilization: float
    seed: int
    enforce_eager: bool  # a case's own `enforce_eager` overrides it (Case.eager)
    skip_tokenizer_init: bool  # prompts then go in as token ids (tiny models ship no tokenizer)
    requires: tuple[str, ...]  # hardware_matrix.yaml capabilities the runs need
    min_mixed_batches: int  # mixed prefill + decode builds each speculative run must show

    @property
    def all_trtllm(self) -> bool:
        """Whether every attention phase runs on TRTLLM, so that build() must not sync at all."""
        return self.use_trtllm_attention and {"trtllm_prefill", "trtllm_decode"} <= set(self.requires)


@dataclass(frozen=True)
class Case:
    suite: str
    id: str
    family: str  # the target's architecture family (tiny_configs.FAMILIES)
    target: str
    method: str
    num_speculative_tokens: int
    draft: str | None  # a drafter checkpoint (eagle, eagle3, draft_model)
    speculators: str | None  # a speculators-format checkpoint: vLLM reads the drafter config from it
    trust_remote_code: bool
    min_match_fraction: float
    min_acceptance_length: float | None
    min_acceptance_length_ratio: float | None
    min_acceptance_rate: float | None
    # The fraction of drafting steps whose draft at each position is accepted, as the drafter's construction (tiny
    # models) or a reference run (real checkpoints) predicts it; None: not predicted.
    acceptance_per_position: tuple[float, ...] | None = None
    acceptance_per_position_tolerance: float = 0.0  # 0: exactly, in accepted drafts per position
    # One-sided, relative (as vLLM's acceptance-length test): each position at least reference x (1 - rtol).
    acceptance_per_position_rtol: float | None = None
    prompt_set: str = "config"  # PROMPT_SETS
    # This case's engines without CUDA graphs or torch.compile (the engine's `enforce_eager` otherwise): one eager
    # case per suite tells a bug of one mode from a bug of both.
    enforce_eager: bool | None = None
    # The least speedup (the speculative engine's output tokens/s over the target alone's, as vLLM runs by default:
    # e2e.speed) this case must keep; None: measured and compared with the baseline run, no floor.
    min_speedup: float | None = None

    @property
    def acceptance_length_floor(self) -> float:
        if self.min_acceptance_length_ratio is not None:
            return self.min_acceptance_length_ratio * self.num_speculative_tokens
        return self.min_acceptance_length or 0.0

    @property
    def checkpoints(self) -> tuple[str, ...]:
        """Every checkpoint the case loads (weights must be reachable)."""
        return tuple(dict.fromkeys(c for c in (self.target, self.draft, self.speculators) if c))


@dataclass(frozen=True)
class SuiteConfig:
    engine: EngineSettings
    max_tokens: int
    prompts: tuple[str, ...]
    suites: dict[str, tuple[Case, ...]]
    tiny_models: dict[str, str]  # name -> family: hand-built models written on the machine before the run
    # The hand-built tiny drafters by kind (``tiny_models.HEAD_WRITERS``): {head name: the tiny model it drafts for}.
    tiny_heads: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

    def cases(self, suite: str) -> tuple[Case, ...]:
        return self.suites.get(suite, ())

    def all_cases(self) -> tuple[Case, ...]:
        """Every suite's cases, suite by suite."""
        return tuple(case for cases in self.suites.values() for case in cases)

    def with_models(self, mapping: dict[str, str]) -> "SuiteConfig":
        """The same cases with checkpoint ids replaced (local directories for the offline tier)."""
        def swap(c: Case) -> Case:
            return replace(c, target=mapping.get(c.target, c.target),
                           draft=mapping.get(c.draft, c.draft) if c.draft else None,
                           speculators=mapping.get(c.speculators, c.speculators) if c.speculators else None)
        return replace(self, suites={s: tuple(swap(c) for c in cs) for s, cs in self.suites.items()})


def _parse_case(doc, path: str, suite: str) -> Case:
    r = Section(doc, path, "an end-to-end case")
    case = Case(
        suite=suite,
        id=r.get("id", text, required=True),
        family=r.get("family", one_of(FAMILIES), required=True),
        target=r.get("target", text, required=True),
        method=r.get("method", one_of(METHODS), required=True),
        num_speculative_tokens=r.get("num_speculative_tokens", integer(1, 16), required=True),
        draft=r.get("draft", text),
        speculators=r.get("speculators", text),
        trust_remote_code=r.get("trust_remote_code", boolean, False),
        min_match_fraction=r.get("min_match_fraction", fraction, required=True),
        min_acceptance_length=r.get("min_acceptance_length", non_negative),
        min_acceptance_length_ratio=r.get("min_acceptance_length_ratio", fraction),
        min_acceptance_rate=r.get("min_acceptance_rate", fraction),
        acceptance_per_position=r.get("acceptance_per_position", fractions),
        acceptance_per_position_tolerance=r.get("acceptance_per_position_tolerance", fraction, 0.0),
        acceptance_per_position_rtol=r.get("acceptance_per_position_rtol", fraction),
        prompt_set=r.get("prompt_set", one_of(PROMPT_SETS), "config"),
        enforce_eager=r.get("enforce_eager", boolean),
        min_speedup=r.get("min_speedup", non_negative),
    )
    r.finish()
    if case.acceptance_per_position_rtol is not None:
        if case.acceptance_per_position is None:
            raise doc.error(join(path, "acceptance_per_position_rtol"),
                            "expected acceptance_per_position beside it (the reference values it applies to)")
        if "acceptance_per_position_tolerance" in r.data:
            raise doc.error(join(path, "acceptance_per_position_rtol"), "expected it or "
                            "acceptance_per_position_tolerance, not both (a relative floor or an absolute band)")
    predicted = case.acceptance_per_position
    if predicted is not None and len(predicted) != case.num_speculative_tokens:
        raise doc.error(join(path, "acceptance_per_position"), f"expected {case.num_speculative_tokens} fractions (one "
                                                           f"per draft position), got {len(predicted)}")
    needs_draft = case.method in ("eagle", "eagle3", "draft_model") and not case.speculators
    if needs_draft and not case.draft:
        raise doc.error(path, f"method {case.method} needs a 'draft' checkpoint (or 'speculators')")
    if case.min_acceptance_length is None and case.min_acceptance_length_ratio is None:
        raise doc.error(path, "expected min_acceptance_length or min_acceptance_length_ratio")
    return case


def _names(top: Section, key: str, what: str, value_reader) -> dict[str, str]:
    """An optional mapping of names to checked strings (tiny models and what they are)."""
    mapping = top.get(key, section(what), None)
    if mapping is None:
        return {}
    names = {name: value_reader(top.doc, f"{key}.{name}", value) for name, value in mapping.data.items()}
    mapping.declare(*names)
    mapping.finish()
    return names


def parse(path: Path) -> SuiteConfig:
    doc = read_document(path)
    top = Section(doc, "", "the end-to-end suite configuration")
    engine = top.get("engine", section("engine settings"), required=True)
    settings = EngineSettings(
        attention_backend=engine.get("attention_backend", text, required=True),
        use_trtllm_attention=engine.get("use_trtllm_attention", boolean, required=True),
        async_scheduling=engine.get("async_scheduling", boolean, required=True),
        enable_chunked_prefill=engine.get("enable_chunked_prefill", boolean, required=True),
        max_num_seqs=engine.get("max_num_seqs", integer(2), required=True),
        max_num_batched_tokens=engine.get("max_num_batched_tokens", integer(16), required=True),
        max_model_len=engine.get("max_model_len", integer(64), required=True),
        gpu_memory_utilization=engine.get("gpu_memory_utilization", fraction, required=True),
        seed=engine.get("seed", integer(0), 0),
        enforce_eager=engine.get("enforce_eager", boolean, False),
        skip_tokenizer_init=engine.get("skip_tokenizer_init", boolean, False),
        requires=engine.get("requires", text_list(non_empty=True), required=True),
        min_mixed_batches=engine.get("min_mixed_batches", integer(1), 1),
    )
    engine.finish()
    sampling = top.get("sampling", section("sampling settings"), required=True)
    max_tokens = sampling.get("max_tokens", integer(1), required=True)
    sampling.finish()
    prompts = top.get("prompts", text_list(non_empty=True), required=True)
    suites_section = top.get("suites", section("suites by name"), required=True)
    suites: dict[str, tuple[Case, ...]] = {}
    for name, cases in suites_section.data.items():
        if not isinstance(cases, list) or not cases:
            raise doc.error(f"suites.{name}", "expected a non-empty list of cases")
        suites[name] = tuple(_parse_case(doc, f"suites.{name}.{i}", name) for i in range(len(cases)))
        ids = [c.id for c in suites[name]]
        for i, case_id in enumerate(ids):
            if case_id in ids[:i]:
                raise doc.error(f"suites.{name}.{i}.id", f"duplicate case id {case_id!r}")
    suites_section.declare(*suites)
    suites_section.finish()
    tiny_models = _names(top, "tiny_models", "tiny models by name", one_of(FAMILIES))
    heads: dict[str, dict[str, str]] = {}
    taken = set(tiny_models)  # names given so far
    for kind, head in HEAD_WRITERS.items():
        heads[kind] = _names(top, head.section, head.what, one_of(tuple(tiny_models)))
        for name in heads[kind]:
            if name in taken:
                raise doc.error(f"{head.section}.{name}", "expected a name not used for another tiny model")
        taken.update(heads[kind])
    top.finish()
    return SuiteConfig(settings, max_tokens, prompts, suites, tiny_models, heads)


@lru_cache(maxsize=None)
def config_path(path: str | None = None) -> Path:
    named = path or os.environ.get(CONFIG_ENV)
    if not named:
        return CONFIG_PATH
    shipped = CONFIG_PATH.parent / named
    return Path(named) if Path(named).exists() or not shipped.exists() else shipped


def load(path: str | None = None) -> SuiteConfig:
    return parse(config_path(path))


def engine_config(config: SuiteConfig, case: Case, speculative: bool):
    """vLLM's engine config for ``case`` on this process's platform (configs only: no tokenizer)."""
    from spec_decode_ci import model_info

    return model_info.engine_config("e2e", **{**engine_kwargs(config, case, speculative), "skip_tokenizer_init": True})


def offline_engine_config(config: SuiteConfig, case: Case, speculative: bool):
    """``engine_config`` on the emulated Blackwell platform."""
    from spec_decode_ci.emulation import emulated_platform

    with emulated_platform():
        return engine_config(config, case, speculative)


def hand_built_target(config: SuiteConfig, case: Case) -> str | None:
    """The directory of ``case``'s target where it is one of the configuration's hand-built tiny models (whose
    greedy rule is known from the weights), else None."""
    target = Path(case.target)
    return case.target if target.name in config.tiny_models and target.is_dir() else None


def eager(config: SuiteConfig, case: Case) -> bool:
    """Whether ``case``'s engines run without CUDA graphs and torch.compile."""
    return config.engine.enforce_eager if case.enforce_eager is None else case.enforce_eager


def engine_kwargs(config: SuiteConfig, case: Case, speculative: bool) -> dict[str, Any]:
    """``LLM`` / ``EngineArgs`` keyword arguments for the target alone, or for target + drafter."""
    e = config.engine
    kwargs: dict[str, Any] = dict(
        model=case.target, attention_backend=e.attention_backend, async_scheduling=e.async_scheduling,
        enable_chunked_prefill=e.enable_chunked_prefill, max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens, max_model_len=e.max_model_len,
        gpu_memory_utilization=e.gpu_memory_utilization, seed=e.seed, trust_remote_code=case.trust_remote_code,
        attention_config={"use_trtllm_attention": e.use_trtllm_attention}, enforce_eager=eager(config, case),
        skip_tokenizer_init=e.skip_tokenizer_init,
    )
    if not speculative:
        return kwargs
    spec: dict[str, Any] = {}
    if compat.drafter_attention_backend_settable():
        # The drafter picks its attention backend on its own (FLASH_ATTN first on Hopper): pin it too.
        spec["attention_backend"] = e.attention_backend
    if case.speculators and not os.path.isdir(case.target):
        kwargs["model"] = case.speculators  # vLLM detects the speculators config (method, k, verifier) ...
    else:
        # A local verifier (a tiny target) is given as the model and the speculators checkpoint as the drafter:
        # vLLM takes the verifier from the checkpoint only when it names a Hub repository (0.33 refuses others).
        spec.update(method=case.method, num_speculative_tokens=case.num_speculative_tokens)
        if case.method != "mtp":
            spec["model"] = case.speculators or case.draft
    kwargs["speculative_config"] = spec  # ... and applies these on top
    return kwargs
