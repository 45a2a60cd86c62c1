"""Deliberate breaks of vLLM for the GPU self-check: each one makes one e2e suite's checks turn red.

A break loads a patched copy of one vLLM module in place of the installed one, in this process only: the source
is read from the installed file, edited once by a regular expression, compiled and registered under the
module's name before vLLM imports it (the installed file is never written). Selected with
``SPEC_DECODE_CI_GPU_BREAK=<name>`` in a pytest run with ``-p spec_decode_ci.e2e.gpu_breaks``;
``scripts/gpu_selfcheck.py`` runs every break against its suite on the GPU smoke's tiny models.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass

from spec_decode_ci.compat import NEWEST, MissingVllmField

ENV = "SPEC_DECODE_CI_GPU_BREAK"
MARKER = "__spec_decode_ci_break__"


@dataclass(frozen=True)
class GpuBreak:
    name: str
    description: str
    module: str  # the vLLM module whose copy is patched
    pattern: str  # matched once in its source
    replacement: str
    suite_module: str  # the e2e test module (spec_decode_ci.suites.e2e) whose checks must go red
    must_fail: tuple[str, ...]  # test ids (function[case]) that must be red
    last_found: str = NEWEST  # the newest release whose code the break was seen to edit


BREAKS = {b.name: b for b in [
    GpuBreak("accept_every_draft",
             "the greedy rejection sampler compares each draft token with itself: every draft is accepted",
             "vllm.v1.sample.rejection_sampler",
             r"target_argmax = target_logits\.argmax\(dim=-1\)",
             "target_argmax = draft_token_ids.to(target_logits.device)",
             "test_eagle", ("test_greedy_output_matches_target[tiny-llama-eagle3]",), last_found="0.33.0"),
    GpuBreak("eagle_hidden_states_shifted",
             "the drafter reads the target's hidden states one position late",
             "vllm.v1.spec_decode.llm_base_proposer",
             r"self\.hidden_states\[:num_tokens\] = target_hidden_states",
             "self.hidden_states[:num_tokens] = torch.roll(target_hidden_states, 1, 0)",
             "test_eagle", ("test_acceptance[tiny-llama-eagle3]",), last_found="0.33.0"),
    GpuBreak("host_sync_in_build",
             "FlashInfer's build() reads the longest sequence back to the host (.item()) on every call",
             "vllm.v1.attention.backends.flashinfer",
             r"\n(?P<indent>[ \t]*)max_seq_len = common_attn_metadata\.max_seq_len\n",
             "\n\\g<indent>max_seq_len = common_attn_metadata.max_seq_len\n"
             "\\g<indent>_longest = int(common_attn_metadata.seq_lens.max().item())\n",
             "test_draft_model", ("test_mixed_batches_without_host_sync[tiny-llama-self]",)),
    GpuBreak("mtp_drops_the_token",
             "the MTP layer drops the embedding of the token it drafts after",
             "vllm.model_executor.models.mimo_mtp",
             r"inputs_embeds = self\.token_layernorm\(inputs_embeds\)",
             "inputs_embeds = self.token_layernorm(torch.zeros_like(inputs_embeds))",
             "test_speculators_mtp", ("test_acceptance[tiny-mimo-mtp]",)),
    GpuBreak("draft_vocab_unmapped",
             "EAGLE-3 drafters with a draft vocabulary skip its draft-to-target mapping (d2t)",
             "vllm.model_executor.models.llama_eagle3",
             r"targets = base \+ self\.draft_id_to_target_id",
             "targets = base",
             "test_speculators_mtp", ("test_acceptance[tiny-llama-speculators-eagle3]",)),
]}


class BreakDoesNotApply(MissingVllmField):
    """The code a break edits is gone from this vLLM: the GPU self-check's breakage, not a finding."""


def patched_source(brk: GpuBreak) -> tuple[str, str]:
    """(the installed module's file, its source with the break applied)."""
    spec = importlib.util.find_spec(brk.module)
    if spec is None or spec.origin is None:
        parent, _, child = brk.module.rpartition(".")
        raise BreakDoesNotApply(parent, child, f"break {brk.name!r}", brk.last_found,
                                detail=f"break {brk.name!r}: vLLM has no module {brk.module}")
    source = open(spec.origin).read()
    patched, count = re.subn(brk.pattern, brk.replacement, source, count=1)
    if count != 1:
        raise BreakDoesNotApply(brk.module, f"/{brk.pattern}/", f"break {brk.name!r}", brk.last_found,
                                detail=f"break {brk.name!r} does not apply to {spec.origin}: the code it edits "
                                       f"(/{brk.pattern}/) is gone; update spec_decode_ci/e2e/gpu_breaks.py")
    return spec.origin, patched


def install(name: str) -> None:
    """Registers the patched copy of the break's module; it must not have been imported yet."""
    brk = BREAKS[name]
    if brk.module in sys.modules:
        raise RuntimeError(f"break {name!r}: {brk.module} is already imported; load this plugin first")
    origin, patched = patched_source(brk)
    spec = importlib.util.find_spec(brk.module)
    module = importlib.util.module_from_spec(spec)
    setattr(module, MARKER, name)
    sys.modules[brk.module] = module
    try:
        exec(compile(patched, origin, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[brk.module]
        raise
    parent, _, child = brk.module.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)


def pytest_configure(config) -> None:
    name = os.environ.get(ENV)
    if name:
        if name not in BREAKS:
            raise ValueError(f"{ENV}={name!r}; expected one of {sorted(BREAKS)}")
        install(name)
