"""PR #39546's two regressions, re-applied to a private copy of vLLM's FlashInfer backend module.

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
from typing import Callable

from spec_decode_ci import compat

ENV = "SPEC_DECODE_CI_REGRESSION"


@dataclass(frozen=True)
class Regression:
    name: str
    description: str
    pattern: str  # regular expression matched once in vLLM's source
    replacement: str
    # Whether this vLLM has the code the regression undoes (a structural probe of the module, never a version):
    # a release without it has the bug natively, and the tier's verdict on that release says so.
    present: Callable[[types.ModuleType], bool] = lambda module: True


REGRESSIONS = {
    r.name: r
    for r in [
        Regression(
            "old_guard",
            "host copy of seq_lens skipped only for decode-only TRTLLM batches (is_only_trtllm_decode)",
            # is_only_trtllm_decode == (no prefills, some decodes, all TRTLLM), in any release's variable names
            compat.seq_lens_guard_pattern(),
            r"is_only_trtllm_decode = num_prefills == 0 and num_decodes > 0 and all_uses_trtllm" "\n"
            r"        needs_seq_lens_cpu = self.use_dcp\g<cascade> or not is_only_trtllm_decode",
        ),
        Regression(
            "stale_indptr",
            "TRTLLM prefill reads paged_kv_indptr.gpu without the on-device cumsum that refreshes it",
            r"\n[ \t]*" + compat.indptr_zeroing_pattern() + r"\n[ \t]*torch\.cumsum\(\s*num_blocks_per_req,"
            r"\s*dim=0,\s*out=paged_kv_indptr_prefill_gpu\[1:\],?\s*\)",
            "",
        ),
        Regression(
            "padded_decode_query_len",
            "a padded spec-decode batch (zero-length requests after a CUDA-graph replay) described to the TRTLLM "
            "decode kernel by tokens / requests instead of each request's query offsets",
            r"return max_q_len, qo_indptr\[: num_decodes \+ 1\], None",
            "return q_len_per_req, None, None",
            present=lambda module: hasattr(module.FlashInferMetadataBuilder, "_compute_decode_query_lens"),
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
        # The control: vLLM's source compiled into a copy unchanged. The tier must stay green on it.
        Regression("none", "no change (control for the copying itself)", r"\A", ""),
    ]
}


class RegressionDoesNotApply(RuntimeError):
    pass


@lru_cache(maxsize=None)
def patched_backend(name: str) -> types.ModuleType:
    import vllm.v1.attention.backends.flashinfer as original

    regression = REGRESSIONS[name]
    source = inspect.getsource(original)
    patched, count = re.subn(regression.pattern, regression.replacement, source, count=1)
    if count != 1:
        raise RegressionDoesNotApply(
            f"regression {name!r} does not apply to {original.__file__}: the code it edits "
            f"(/{regression.pattern}/) is gone; update spec_decode_ci/flashinfer/regressions.py or spec_decode_ci/compat.py")
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(__file__=original.__file__, __package__=original.__package__)
    exec(compile(patched, original.__file__, "exec"), module.__dict__)
    return module


def requested() -> types.ModuleType | None:
    """The patched module named by $SPEC_DECODE_CI_REGRESSION, or None for vLLM's own."""
    name = os.environ.get(ENV)
    if not name:
        return None
    if name not in REGRESSIONS:
        raise ValueError(f"{ENV}={name!r}; expected one of {sorted(REGRESSIONS)}")
    return patched_backend(name)
