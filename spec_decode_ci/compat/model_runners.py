"""The GPU model runners: which one vLLM runs a config with, which it ships, and how each pads a batch to a
CUDA-graph size (read from its source)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from spec_decode_ci.compat.probes import NEWEST, MissingVllmField, probe, vllm_module, module_origin, difference, require


V1_RUNNER, V2_RUNNER = "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner"


@difference("0.34.0", "model runner V2 only (vllm/v1/worker/gpu/); before, VllmConfig.use_v2_model_runner chose "
                      "between it and V1 (gpu_model_runner.py, cudagraph_dispatcher.py) per configuration")
def model_runner(vllm_config) -> str:
    """The GPU model runner this vLLM runs ``vllm_config`` with (``V1_RUNNER`` or ``V2_RUNNER``); ask under the
    platform the config is for (the choice reads it)."""
    has_v1, has_v2 = module_origin(V1_RUNNER) is not None, module_origin(V2_RUNNER) is not None
    if has_v1 and has_v2 and hasattr(type(vllm_config), "use_v2_model_runner"):
        return V2_RUNNER if vllm_config.use_v2_model_runner else V1_RUNNER
    if has_v1 or has_v2:
        return V1_RUNNER if has_v1 else V2_RUNNER
    raise MissingVllmField("vllm.v1.worker", "gpu_model_runner / gpu.model_runner", "the GPU model runner")


RUNNER_NAMES = {V1_RUNNER: "V1", V2_RUNNER: "V2"}


def shipped_runners() -> tuple[str, ...]:
    """The GPU model runners this vLLM ships (``V1_RUNNER``, ``V2_RUNNER``), found by their modules."""
    return tuple(runner for runner in (V1_RUNNER, V2_RUNNER) if module_origin(runner) is not None)


def runner_name(module: str) -> str:
    """"V1" or "V2" for a GPU model runner's module (``model_runner``), the module itself for any other."""
    return RUNNER_NAMES.get(module, module)


@dataclass(frozen=True)
class CudaGraphPadding:
    """How a vLLM GPU model runner fills the requests and tokens it adds to reach a captured CUDA-graph size:
    padded requests have no query tokens (``query_start_loc`` repeats its last entry), ``seq_len`` and
    block-table rows of ``block_id``; padded tokens map to ``slot``; ``num_actual_tokens`` counts them.

    Which batches are padded, and to what, is the runner's: V1 replays a uniform decode graph of T tokens with
    min(T // (1 + k), max_num_seqs) requests and T tokens, and pads a mixed batch's tokens; V2 captures uniform
    decode graphs per (requests, 1 + k), so a replay holds requests x (1 + k) tokens, and runs a mixed batch on
    a backend without full graphs for them (FlashInfer) piecewise, its attention metadata unpadded."""

    runner: str
    seq_len: int
    block_id: int
    slot: int

    def padded_counts(self, query_lens, num_tokens_padded: int, uniform_query_len: int,
                      max_num_seqs: int) -> tuple[int, int]:
        """(requests, tokens) the runner adds to a batch of ``query_lens`` replayed on a graph of
        ``num_tokens_padded`` tokens."""
        num_tokens = sum(query_lens)
        if num_tokens_padded < num_tokens:
            raise ValueError(f"cannot pad {num_tokens} tokens to {num_tokens_padded}")
        if not all(q == uniform_query_len for q in query_lens):
            return (0, num_tokens_padded - num_tokens) if self.runner == V1_RUNNER else (0, 0)
        if num_tokens_padded % uniform_query_len:
            raise ValueError(f"a uniform decode graph of {num_tokens_padded} tokens needs a multiple of "
                             f"{uniform_query_len}")
        reqs = min(num_tokens_padded // uniform_query_len, max_num_seqs)
        tokens = num_tokens_padded if self.runner == V1_RUNNER else reqs * uniform_query_len
        return reqs - len(query_lens), tokens - num_tokens


# Per runner, per module: the rules ``CudaGraphPadding`` encodes, as the runner's source writes them.
_PADDING_RULES = {
    V1_RUNNER: {
        V1_RUNNER: {
            "padded requests have no query tokens": r"query_start_loc\.np\[num_reqs \+ 1 ?:\]\.fill\(cu_num_tokens\[-1\]\)",
            "padded requests have seq_len 0": r"self\.seq_lens\[num_reqs:\]\.fill_\(0\)",
            "padded block-table rows hold NULL_BLOCK_ID": r"\[num_reqs:num_reqs_padded\]\.fill_\(NULL_BLOCK_ID\)",
            "padded tokens map to slot -1 (PAD_SLOT_ID)":
                r"slot_mapping\[num_tokens_unpadded:num_tokens_padded\]\.fill_\(-1\)",
            "num_actual_tokens counts padded tokens": r"num_actual_tokens=num_tokens_padded",
        },
        "vllm.v1.cudagraph_dispatcher": {
            "a uniform decode graph of T tokens replays min(T // (1 + k), max_num_seqs) requests":
                r"num_reqs = min\(num_tokens_padded // uniform_decode_query_len, max_num_seqs\)",
        },
    },
    V2_RUNNER: {
        V2_RUNNER: {
            "padded requests have no query tokens": r"query_start_loc_np\[num_reqs \+ 1 ?:\] = num_tokens\b",
        },
        "vllm.v1.worker.gpu.input_batch": {
            "padded requests have seq_len 0": r"tl\.store\(seq_lens_ptr \+ block, 0, mask=mask\)",
        },
        "vllm.v1.worker.gpu.block_table": {
            "padded block-table rows hold 0 (NULL_BLOCK_ID)":
                r"if batch_idx >= num_reqs:\s*# Zero out padded rows\.[^@]*?tl\.store\(dst_row_ptr \+ offset, 0,",
            "padded tokens map to PAD_SLOT_ID": r"PAD_ID=PAD_SLOT_ID",
        },
        "vllm.v1.worker.gpu.model_states.default": {
            # (0.26: a PIECEWISE graph too, under the opt-in VLLM_USE_BREAKABLE_CUDAGRAPH)
            "a FULL graph's attention metadata counts the padded requests and tokens, any other the real ones":
                r"if cudagraph_mode == CUDAGraphMode\.FULL(?: or \([^:]*?\))?:[^@]*?"
                r"num_reqs = input_batch\.num_reqs_after_padding\s*"
                r"num_tokens = input_batch\.num_tokens_after_padding\s*else:[^@]*?num_tokens = input_batch\.num_tokens\n",
        },
        "vllm.v1.worker.gpu.cudagraph_utils": {
            "a uniform decode graph holds requests x (1 + k) tokens, at most max_num_seqs requests":
                r"rounded_num_reqs = rounded_num_tokens // decode_query_len|num_tokens=n \* q,\s*num_reqs=n,",
        },
    },
}


_RUNNER_LAST_FOUND = {V1_RUNNER: "0.33.0"}  # model runner V1 left vLLM in 0.34.0


def last_release_with(runner: str | None) -> str:
    """The newest release that ships GPU model runner ``runner`` (None: code both runners call)."""
    return _RUNNER_LAST_FOUND.get(runner, NEWEST)


@probe
@lru_cache(maxsize=None)
def cudagraph_padding(runner: str) -> CudaGraphPadding:
    """``runner``'s padding rules (``model_runner``), read from the installed vLLM's source (not imported); a rule
    no longer found there fails by name."""
    from pathlib import Path

    utils = vllm_module("vllm.v1.attention.backends.utils")
    missing = []
    for module, rules in _PADDING_RULES[runner].items():
        origin = module_origin(module)
        if origin is None:
            raise MissingVllmField(module.rpartition(".")[0], module.rpartition(".")[2],
                                   "the GPU model runner's padding rules", last_release_with(runner),
                                   detail=f"module {module} is not found")
        source = Path(origin).read_text()
        missing += [f"{module}: {rule}" for rule, pattern in rules.items() if not re.search(pattern, source)]
    if missing:
        raise MissingVllmField(runner, "its CUDA-graph padding rules", detail=f"vLLM's runner no longer shows how it "
                               f"pads to a CUDA-graph size: {'; '.join(missing)}")
    block_id = require(utils, "NULL_BLOCK_ID", what="padding block id")
    if runner == V2_RUNNER and block_id != 0:
        raise MissingVllmField("vllm.v1.attention.backends.utils", "NULL_BLOCK_ID == 0",
                               "model runner V2 zeroes padded block-table rows")
    return CudaGraphPadding(runner, seq_len=0, block_id=block_id,
                            slot=require(utils, "PAD_SLOT_ID", what="padding slot id"))
