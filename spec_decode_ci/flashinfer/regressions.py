"""Regressions of the bug classes the build-path tier exists for, re-applied to a private copy of vLLM's module:
PR #39546's two, the later FlashInfer ones, and the MLA builders' (applied to vLLM's common MLA module, with a
copy of the backend's module built on top of it so its builder inherits the regression).

The copy is compiled from vLLM's own source with one textual change and used only by the harness that
asks for it (``SPEC_DECODE_CI_REGRESSION=<name>``); vLLM's real module is never modified. If vLLM's code
no longer contains the text a regression edits, that is reported as a failure: the self-check would
otherwise silently test nothing.
"""

from __future__ import annotations

import inspect
import os
import re
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from spec_decode_ci import compat

ENV = "SPEC_DECODE_CI_REGRESSION"
FLASHINFER = "vllm.v1.attention.backends.flashinfer"
MLA_COMMON = "vllm.model_executor.layers.attention.mla_attention"

# The source text the regressions edit, in every form a supported release writes it:
# the TRTLLM prefill's indptr zeroing, a slice since 0.21.0 ([:1] = 0), a Python int stored before ([0] = 0);
INDPTR_ZEROING = r"paged_kv_indptr_prefill_gpu\[(?::1|0)\] = 0"
# the host-copy guard, with the cascade term before 0.32.0 and without it since.
SEQ_LENS_GUARD = r"needs_seq_lens_cpu = self\.use_dcp(?P<cascade>(?: or use_cascade)?) or not all_uses_trtllm"


def _needs_v1_padding() -> str | None:
    """Only model runner V1 replays a capped uniform decode graph with more tokens than requests x (1 + k)."""
    from spec_decode_ci.flashinfer.harness import BuildHarness

    runner = BuildHarness().cudagraph_padding.runner
    if runner == compat.V1_RUNNER:
        return None
    return (f"this vLLM runs the harness's config on {runner}, which pads a uniform decode batch to requests x "
            f"(1 + k) tokens: the tokens / requests this regression trusts is then always right")


@dataclass(frozen=True)
class Regression:
    name: str
    description: str
    pattern: str  # regular expression matched once in vLLM's source
    replacement: str
    # Whether this vLLM has the code the regression undoes (a structural probe of the module, never a version):
    # a release without it has the bug natively, and the tier's verdict on that release says so.
    present: Callable[[types.ModuleType], bool] = lambda module: True
    target: str = FLASHINFER  # the module the regression edits
    # Why the batches this vLLM's runner hands build() never meet the edited code (None: they do).
    unobservable: Callable[[], str | None] = lambda: None


REGRESSIONS = {
    r.name: r
    for r in [
        Regression(
            "old_guard",
            "host copy of seq_lens skipped only for decode-only TRTLLM batches (is_only_trtllm_decode)",
            # is_only_trtllm_decode == (no prefills, some decodes, all TRTLLM), in any release's variable names
            SEQ_LENS_GUARD,
            r"is_only_trtllm_decode = num_prefills == 0 and num_decodes > 0 and all_uses_trtllm" "\n"
            r"        needs_seq_lens_cpu = self.use_dcp\g<cascade> or not is_only_trtllm_decode",
        ),
        Regression(
            "stale_indptr",
            "TRTLLM prefill reads paged_kv_indptr.gpu without the on-device cumsum that refreshes it",
            r"\n[ \t]*" + INDPTR_ZEROING + r"\n[ \t]*torch\.cumsum\(\s*num_blocks_per_req,"
            r"\s*dim=0,\s*out=paged_kv_indptr_prefill_gpu\[1:\],?\s*\)",
            "",
        ),
        Regression(
            "stale_prefill_query_offsets",
            "TRTLLM prefill hands the kernel the persistent qo_indptr_prefill buffer (kept for FULL CUDA graphs) "
            "without writing this batch's rebased query offsets into it",
            r"\n[ \t]*torch\.sub\(\s*qo_indptr\[prefill_start : num_reqs \+ 1\],\s*qo_indptr\[prefill_start\],"
            r"\s*out=qo_indptr_prefill_gpu,?\s*\)",
            "",
            present=lambda module: "out=qo_indptr_prefill_gpu" in inspect.getsource(module),
        ),
        Regression(
            "padded_decode_query_len",
            "a padded spec-decode batch (zero-length requests after a CUDA-graph replay) described to the TRTLLM "
            "decode kernel by tokens / requests instead of each request's query offsets",
            r"return max_q_len, qo_indptr\[: num_decodes \+ 1\], None",
            "return q_len_per_req, None, None",
            present=lambda module: hasattr(module.FlashInferMetadataBuilder, "_compute_decode_query_lens"),
            unobservable=_needs_v1_padding,
        ),
        Regression(
            "inputs_mutated",
            "build() subtracts the prefills' query lengths from the shared host seq_lens in place",
            r"\n(?P<indent>[ \t]*)qo_indptr_cpu = common_attn_metadata\.query_start_loc_cpu\n",
            "\n\\g<indent>qo_indptr_cpu = common_attn_metadata.query_start_loc_cpu\n"
            "\\g<indent>common_attn_metadata.seq_lens_cpu_upper_bound[num_decodes:] -= "
            "qo_indptr_cpu[num_decodes + 1:] - qo_indptr_cpu[num_decodes:-1]\n",
        ),
        Regression(
            "state_carried",
            "build() keeps the largest max_seq_len seen in a builder attribute and describes later batches with it",
            r"\n(?P<indent>[ \t]*)max_seq_len = common_attn_metadata\.max_seq_len\n",
            "\n\\g<indent>self._max_seq_len_seen = max(getattr(self, '_max_seq_len_seen', 0), "
            "common_attn_metadata.max_seq_len)\n\\g<indent>max_seq_len = self._max_seq_len_seen\n",
        ),
        Regression(
            "pageable_plan_inputs",
            "the native prefill's plan() inputs handed over in the reused pageable host buffers, not staged in "
            "page-locked memory",
            r"if PIN_MEMORY:(?P<body>\s+qo_indptr_prefill_cpu = qo_indptr_prefill_cpu\.pin_memory\(\))",
            "if False:\\g<body>",
            present=lambda module: "qo_indptr_prefill_cpu.pin_memory()" in inspect.getsource(module),
        ),
        Regression(
            "dcp_shared_mutation",
            "under DCP, build() adjusts prefill lengths in the runner's host seq lens in place (no copy first)",
            r"\n[ \t]*seq_lens_cpu = seq_lens_cpu\.clone\(\)",
            "",
            present=lambda module: "seq_lens_cpu = seq_lens_cpu.clone()" in inspect.getsource(module),
        ),
        Regression(
            "dcp_global_pages",
            "under DCP, page counts and last-page lengths taken from the global lengths, not the rank's share",
            r"seq_lens_cpu = get_dcp_local_seq_lens\(",
            "_rank_local_seq_lens = get_dcp_local_seq_lens(",
        ),
        Regression(
            "mla_prefill_host_sync",
            "the MLA prefill path copies the device seq_lens to the host (.cpu()) instead of reading the runner's "
            "host upper bound: a host sync per step with MTP and chunked prefill",
            r"seq_lens_cpu = common_attn_metadata\.seq_lens_cpu_upper_bound",
            "seq_lens_cpu = common_attn_metadata.seq_lens.cpu()",
            target=MLA_COMMON,
        ),
        Regression(
            "mla_context_counts_queries",
            "the MLA prefill's context gathered from the cache includes this step's query tokens (seq lens that "
            "already count them get them added once more before the queries are subtracted)",
            r"\n(?P<indent>[ \t]*)seq_lens_cpu = common_attn_metadata\.seq_lens_cpu_upper_bound\n",
            "\n\\g<indent>seq_lens_cpu = common_attn_metadata.seq_lens_cpu_upper_bound\n"
            "\\g<indent>seq_lens_cpu = seq_lens_cpu + (query_start_loc_cpu[1:] - query_start_loc_cpu[:-1])\n",
            target=MLA_COMMON,
        ),
        Regression(
            "mla_stale_decode_seq_lens",
            "MLA decode seq lens handed to the kernel from a persistent builder buffer that build() refreshes only "
            "when the batch has prefills",
            r"\n(?P<indent>[ \t]*)decode_metadata = self\._build_decode\(",
            "\n\\g<indent>if not hasattr(self, '_decode_seq_lens'):\n"
            "\\g<indent>    self._decode_seq_lens = seq_lens.new_zeros(self.vllm_config.scheduler_config.max_num_seqs)\n"
            "\\g<indent>if num_prefills > 0:\n"
            "\\g<indent>    self._decode_seq_lens[:num_reqs].copy_(seq_lens, non_blocking=True)\n"
            "\\g<indent>seq_lens = self._decode_seq_lens\n"
            "\\g<indent>decode_metadata = self._build_decode(",
            target=MLA_COMMON,
        ),
        # The control: vLLM's source compiled into a copy unchanged. The tier must stay green on it.
        Regression("none", "no change (control for the copying itself)", r"\A", ""),
    ]
}


class RegressionDoesNotApply(compat.MissingVllmField):
    """The code a regression edits is gone from this vLLM: the self-check's breakage, not a finding."""


def _compiled_copy(original: types.ModuleType, source: str) -> types.ModuleType:
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(__file__=original.__file__, __package__=original.__package__)
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


def _apply(regression: Regression, source: str, where: str) -> str:
    patched, count = re.subn(regression.pattern, regression.replacement, source, count=1)
    if count != 1:
        raise RegressionDoesNotApply(
            regression.target, f"/{regression.pattern}/", f"regression {regression.name!r}",
            detail=f"regression {regression.name!r} does not apply to {where}: the code it edits is gone; "
                   f"update spec_decode_ci/flashinfer/regressions.py")
    return patched


def _with_class_recompiled(original: types.ModuleType, cls: type, transform=lambda source: source,
                           **replaced: Any) -> types.ModuleType:
    """A module with ``original``'s namespace (``replaced`` names swapped) in which class ``cls`` is compiled
    again from its source through ``transform``: for modules whose import has side effects (custom ops)."""
    lines, first = inspect.getsourcelines(cls)
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(vars(original))
    module.__dict__.update(replaced)
    source = "\n" * (first - 1) + transform("".join(lines))  # line numbers stay those of vLLM's file
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


@lru_cache(maxsize=None)
def patched_backend(name: str) -> types.ModuleType:
    """A copy of the module regression ``name`` targets, with the regression applied (for vLLM's common MLA
    module, whose import registers custom ops, the builder class alone is compiled again)."""
    import importlib

    regression = REGRESSIONS[name]
    original = importlib.import_module(regression.target)
    if regression.target == MLA_COMMON:
        cls = original.MLACommonMetadataBuilder
        where = f"{original.__file__} ({cls.__name__})"
        return _with_class_recompiled(original, cls, lambda source: _apply(regression, source, where))
    return _compiled_copy(original, _apply(regression, inspect.getsource(original), original.__file__))


def _requested_name() -> str | None:
    name = os.environ.get(ENV)
    if name and name not in REGRESSIONS:
        raise ValueError(f"{ENV}={name!r}; expected one of {sorted(REGRESSIONS)}")
    return name or None


def requested() -> types.ModuleType | None:
    """The patched FlashInfer backend module named by $SPEC_DECODE_CI_REGRESSION, or None for vLLM's own
    (also when the regression named edits another module)."""
    name = _requested_name()
    if name is None or REGRESSIONS[name].target != FLASHINFER:
        return None
    return patched_backend(name)


@lru_cache(maxsize=None)
def _mla_backend_copy(name: str, builder: type) -> tuple[types.ModuleType, types.ModuleType]:
    import importlib

    original_common = importlib.import_module(MLA_COMMON)
    common = patched_backend(name) if REGRESSIONS[name].target == MLA_COMMON else \
        _with_class_recompiled(original_common, original_common.MLACommonMetadataBuilder)
    backend = importlib.import_module(builder.__module__)
    if builder is original_common.MLACommonMetadataBuilder:
        return common, common
    return _with_class_recompiled(backend, builder, MLACommonMetadataBuilder=common.MLACommonMetadataBuilder), common


def requested_mla_backend(builder: type) -> tuple[types.ModuleType, types.ModuleType] | None:
    """(a copy of the module of the MLA builder class ``builder``, the copy of vLLM's common MLA module it is
    built on), the common builder regressed as $SPEC_DECODE_CI_REGRESSION names (unchanged for the control);
    None for vLLM's own modules. Each copy defines the builder class under its own name."""
    name = _requested_name()
    if name is None or REGRESSIONS[name].target != MLA_COMMON and name != "none":
        return None
    return _mla_backend_copy(name, builder)
