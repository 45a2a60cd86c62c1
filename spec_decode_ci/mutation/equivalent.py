"""Operator mutants of vLLM's builders that no behaviour of ``build()`` can tell apart from vLLM's code, each
with the one-line reason a reviewer checks against vLLM's source: unreachable on every configuration vLLM builds
for the backend, overwritten or never read later, or a value only a hardware-boundary stand-in reads.

Keyed by ``Mutant.key`` (function, operator, before -> after, the expression a constant stands in, which
occurrence): no line numbers, so an entry holds while vLLM only moves the code. A listed mutant the tier kills
fails the mutation run (the entry went stale). Entries were read against vLLM 0.33.0's source.
"""

from __future__ import annotations

_QUERY_LENS = "FlashInferMetadataBuilder._compute_decode_query_lens"
_BUILD = "FlashInferMetadataBuilder.build"

EQUIVALENT: dict[str, str] = {
    f"{_QUERY_LENS} boolean: num_decodes == 0 or num_decode_tokens == 0 -> num_decodes == 0 and "
    f"num_decode_tokens == 0":
        "build() calls it only with num_decodes > 0, and every decode has a query token: both tests are false",
    f"{_QUERY_LENS} constant: 1 -> 2 in 1, None, None":
        "the early return is unreachable: build() calls it only with num_decodes > 0 and so num_decode_tokens > 0",
    f"{_QUERY_LENS} constant: 0 -> 1 in num_decode_tokens == 0":
        "num_decode_tokens == 1 means one decode of one token, for which the rest returns (1, None, None) too",
    f"{_QUERY_LENS} constant: 0 -> 1 in nonzero[0]":
        "with two or more non-zero lengths, all equal nonzero[0] exactly when all equal nonzero[1]; with fewer, "
        "nonzero.numel() <= 1 decides first",
    # A uniform decode batch described through its query offsets as well (the ragged form): the kernel gets the
    # same query length for every request.
    f"{_QUERY_LENS} arithmetic: num_decode_tokens // num_decodes -> num_decode_tokens * num_decodes":
        "a uniform batch then fails the uniform test and is described by its offsets, with the same query length",
    f"{_QUERY_LENS} compare: num_decode_tokens % num_decodes == 0 -> num_decode_tokens % num_decodes != 0":
        "a uniform batch then fails the uniform test and is described by its offsets, with the same query length",
    f"{_QUERY_LENS} constant: 0 -> 1 in num_decode_tokens % num_decodes == 0":
        "a uniform batch then fails the uniform test and is described by its offsets, with the same query length",
    f"{_QUERY_LENS} compare: decode_q_lens == q_len_per_req -> decode_q_lens != q_len_per_req":
        "a uniform batch then fails the uniform test and is described by its offsets, with the same query length",
    # Padded requests (no queries of their own) replayed on a uniform graph: the runner's FULL-graph metadata
    # already has them read the padding rows (V2 counts padded requests and tokens); the real rows stay the same.
    f"{_QUERY_LENS} boolean: num_decode_tokens % num_decodes == 0 and bool( (decode_q_lens == q_len_per_req)"
    f".all().item() ) -> num_decode_tokens % num_decodes == 0 or bool((decode_q_lens == q_len_per_req).all()"
    f".item())":
        "only where tokens divide by requests (unpadded uniform batches, or zero-length padded requests on a graph "
        "of requests x (1 + k) tokens): the padded requests read the padding rows, as V2 has them read; every "
        "real request's rows are unchanged (test_padded_batches_describe_exactly_the_real_requests)",
    f"{_QUERY_LENS} constant: 1 -> 2 in num_decodes + 1 #2":
        "this return is reached only by decode-only batches (zero-length padding after a uniform graph's decodes), "
        "where qo_indptr holds num_decodes + 1 offsets and the longer slice stops at its end",
    # XQA's half (Hopper), where decodes may be ragged.
    f"{_QUERY_LENS} boolean: uniform and num_decode_tokens == num_decodes * q_len_per_req -> uniform or "
    f"num_decode_tokens == num_decodes * q_len_per_req":
        "differs only where every non-empty decode has q tokens and the batch carries more (V1's capped replays): the "
        "uniform description reads each real request's rows as the ragged one does, without the ragged mask's copies",
    f"{_QUERY_LENS} compare: q_len_per_req <= 1 -> q_len_per_req < 1":
        "one-token decodes then go by their offsets, one row each as before, and _get_decode_mask makes no mask for "
        "a query length of 1 either way",
    f"{_QUERY_LENS} compare: max_q_len > 1 -> max_q_len >= 1":
        "one-token decodes with zero-length padding described by their offsets: one query per real request either way",
    f"{_QUERY_LENS} constant: 0 -> 1 in decode_q_lens > 0":
        "leaving one-token decodes out too changes `uniform` only where the token count test fails anyway",
    f"{_QUERY_LENS} compare: nonzero.numel() > 0 -> nonzero.numel() >= 0":
        "nonzero is never empty: build() calls it with num_decode_tokens > 0",
    f"{_QUERY_LENS} constant: 1 -> 2 in int(nonzero.max().item()) if nonzero.numel() > 0 else 1":
        "nonzero is never empty: build() calls it with num_decode_tokens > 0",
    f"{_QUERY_LENS} compare: nonzero.numel() <= 1 -> nonzero.numel() < 1":
        "one length compared with itself is equal too",
    f"{_QUERY_LENS} constant: 1 -> 2 in nonzero.numel() <= 1":
        "num_decode_tokens == num_decodes * (the largest length) holds only when every length is it, so `uniform` "
        "never decides",
    f"{_BUILD} compare: num_prefills > 0 -> num_prefills >= 0":
        "with no prefills the DCP branch copies seq_lens and subtracts over an empty range: the same lengths",
    f"{_BUILD} arithmetic: qo_indptr_cpu[num_decodes:] - qo_indptr_cpu[num_decodes] -> "
    f"qo_indptr_cpu[num_decodes:] + qo_indptr_cpu[num_decodes]":
        "only differences of consecutive entries are read, which a shift of every entry leaves",
    f"{_BUILD} constant: 1 -> 2 in :1":
        "entry 1 is written by the cumsum into paged_kv_indptr_prefill_gpu[1:] that follows",
    f"{_BUILD} compare: self.q_data_type_prefill != FP8_DTYPE -> self.q_data_type_prefill == FP8_DTYPE":
        "only the TRTLLM prefill table's width changes (cut to the longest prefill or not): each row, the same pages",
    f"{_BUILD} boolean: self.q_data_type_prefill != FP8_DTYPE and self.cache_dtype.startswith(\"fp8\") -> "
    f"self.q_data_type_prefill != FP8_DTYPE or self.cache_dtype.startswith('fp8')":
        "only the TRTLLM prefill table's width changes (cut to the longest prefill or not): each row, the same pages",
    f"{_BUILD} compare: self.reorder_batch_threshold > 1 -> self.reorder_batch_threshold >= 1":
        "uses_spec_reorder only reaches use_trtllm_attention(is_prefill=True), which reads has_spec for decode only",
    f"{_BUILD} constant: 1 -> 2 in self.reorder_batch_threshold > 1":
        "uses_spec_reorder only reaches use_trtllm_attention(is_prefill=True), which reads has_spec for decode only",
    f"{_BUILD} not: not causal -> causal #2":
        "the branch only logs a warning (non-causal drafter attention on FlashInfer)",
    f"{_BUILD} boolean: not causal and self.use_trtllm_decode_attention -> not causal or "
    f"self.use_trtllm_decode_attention":
        "the branch only logs a warning (non-causal drafter attention on FlashInfer)",
    "FlashInferMetadataBuilder._get_decode_mask compare: q_len_per_req <= 1 -> q_len_per_req < 1":
        "a one-token draft block's mask lets the token see itself, as no mask does",
    f"{_BUILD} compare: seq_lens_cpu_upper_bound is not None -> seq_lens_cpu_upper_bound is None":
        "max_seq_len bounds the longest prefill too: the FP8 prefill's table gets more columns of the same rows, "
        "and reads the same pages",
    "FlashInferMetadataBuilder._compute_flashinfer_kv_metadata call: self.paged_kv_last_page_len.copy_to_gpu(num_reqs) "
    "-> pass":
        "its one reader, the CUDA-graph decode wrapper's buffer, gets the host lengths from the wrapper's own plan "
        "(FlashInfer's plan and fast_decode_plan copy last_page_len)",
    "FlashInferMetadataBuilder._compute_flashinfer_kv_metadata constant: 1 -> 2 in num_reqs + 1 #2":
        "copies one indptr entry past the batch's num_reqs + 1 to the device, which nothing of this batch reads",
}

# Equivalent only where no CUDA device runs the real kernel: on a CPU the Triton page-index copy is a host
# reference (spec_decode_ci.flashinfer.harness.CopyPageIndicesOnHost) that reads no launch parameter.
WITHOUT_CUDA: dict[str, str] = {
    "FlashInferMetadataBuilder._compute_flashinfer_kv_metadata constant: 1024 -> 1025 in BLOCK_SIZE=1024":
        "a Triton launch parameter of _copy_page_indices_kernel, which the CPU's host reference does not read",
}


def reason(key: str) -> str | None:
    """Why the mutant ``key`` cannot change behaviour here (None: it can)."""
    found = EQUIVALENT.get(key)
    if found is None and not _cuda():
        found = WITHOUT_CUDA.get(key)
    return found


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
