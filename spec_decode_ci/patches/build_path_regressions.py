"""The CPU self-check's regressions: each re-applies a bug class of vLLM's metadata builders (PR #39546's two
first) to a copy of the builder's module, and the build-path tier must turn red against it."""

from __future__ import annotations

from spec_decode_ci import compat
from spec_decode_ci.patches.record import MLA_COMMON, regression, source_contains

# The source text the regressions edit, in every form a supported release writes it:
# the TRTLLM prefill's indptr zeroing, a slice since 0.21.0 ([:1] = 0), a Python int stored before ([0] = 0);
INDPTR_ZEROING = r"paged_kv_indptr_prefill_gpu\[(?::1|0)\] = 0"
# the host-copy guard, with the cascade term before 0.32.0 and without it since.
SEQ_LENS_GUARD = r"needs_seq_lens_cpu = self\.use_dcp(?P<cascade>(?: or use_cascade)?) or not all_uses_trtllm"


def _needs_v1_padding(runner: str) -> str | None:
    """Only model runner V1 replays a capped uniform decode graph with more tokens than requests x (1 + k)."""
    if runner == compat.V1_RUNNER:
        return None
    return (f"{runner} pads a uniform decode batch to requests x (1 + k) tokens: the tokens / requests this "
            f"regression trusts is then always right")


REGRESSIONS = {
    r.name: r
    for r in [
        regression(
            "old_guard",
            "host copy of seq_lens skipped only for decode-only TRTLLM batches (is_only_trtllm_decode)",
            # is_only_trtllm_decode == (no prefills, some decodes, all TRTLLM), in any release's variable names
            SEQ_LENS_GUARD,
            r"is_only_trtllm_decode = num_prefills == 0 and num_decodes > 0 and all_uses_trtllm" "\n"
            r"        needs_seq_lens_cpu = self.use_dcp\g<cascade> or not is_only_trtllm_decode",
            must_fail=('test_guard[prefill=yes-trtllm,decode=yes-trtllm]', 'test_guard[prefill=yes-trtllm,decode=no-trtllm]'),
        ),
        regression(
            "stale_indptr",
            "TRTLLM prefill reads paged_kv_indptr.gpu without the on-device cumsum that refreshes it",
            r"\n[ \t]*" + INDPTR_ZEROING + r"\n[ \t]*torch\.cumsum\(\s*num_blocks_per_req,"
            r"\s*dim=0,\s*out=paged_kv_indptr_prefill_gpu\[1:\],?\s*\)",
            "",
            must_fail=('test_trtllm_fields_equal_reference[16]', 'test_poison_does_not_reach_the_kernels[trtllm-trtllm]', 'test_random_batches[16]', 'test_random_batches[64]'),
        ),
        regression(
            "stale_prefill_query_offsets",
            "TRTLLM prefill hands the kernel the persistent qo_indptr_prefill buffer (kept for FULL CUDA graphs) "
            "without writing this batch's rebased query offsets into it",
            r"\n[ \t]*torch\.sub\(\s*qo_indptr\[prefill_start : num_reqs \+ 1\],\s*qo_indptr\[prefill_start\],"
            r"\s*out=qo_indptr_prefill_gpu,?\s*\)",
            "",
            present=source_contains("out=qo_indptr_prefill_gpu"),
            must_fail=('test_trtllm_fields_equal_reference[16]', 'test_poison_does_not_reach_the_kernels[trtllm-trtllm]', 'test_random_batches[16]'),
        ),
        regression(
            "padded_decode_query_len",
            "a padded spec-decode batch (zero-length requests after a CUDA-graph replay) described to the TRTLLM "
            "decode kernel by tokens / requests instead of each request's query offsets",
            r"return max_q_len, qo_indptr\[: num_decodes \+ 1\], None",
            "return q_len_per_req, None, None",
            present=lambda module: hasattr(module.FlashInferMetadataBuilder, "_compute_decode_query_lens"),
            unobservable=_needs_v1_padding,
            must_fail=('test_padded_batches_describe_exactly_the_real_requests[V1-16-sm100]',
                       'test_padded_batches_describe_exactly_the_real_requests[V1-64-sm100]'),
        ),
        regression(
            "inputs_mutated",
            "build() subtracts the prefills' query lengths from the shared host seq_lens in place",
            r"\n(?P<indent>[ \t]*)qo_indptr_cpu = common_attn_metadata\.query_start_loc_cpu\n",
            "\n\\g<indent>qo_indptr_cpu = common_attn_metadata.query_start_loc_cpu\n"
            "\\g<indent>common_attn_metadata.seq_lens_cpu_upper_bound[num_decodes:] -= "
            "qo_indptr_cpu[num_decodes + 1:] - qo_indptr_cpu[num_decodes:-1]\n",
            must_fail=('test_build_leaves_its_inputs_untouched[prefill=trtllm-decode=trtllm]', 'test_build_leaves_its_inputs_untouched[prefill=native-decode=native]'),
        ),
        regression(
            "state_carried",
            "build() keeps the largest max_seq_len seen in a builder attribute and describes later batches with it",
            r"\n(?P<indent>[ \t]*)max_seq_len = common_attn_metadata\.max_seq_len\n",
            "\n\\g<indent>self._max_seq_len_seen = max(getattr(self, '_max_seq_len_seen', 0), "
            "common_attn_metadata.max_seq_len)\n\\g<indent>max_seq_len = self._max_seq_len_seen\n",
            must_fail=('test_no_state_carried_between_builds[prefill=trtllm-decode=trtllm]', 'test_no_state_carried_between_builds[prefill=native-decode=native]'),
        ),
        regression(
            "pageable_plan_inputs",
            "the native prefill's plan() inputs handed over in the reused pageable host buffers, not staged in "
            "page-locked memory",
            r"if PIN_MEMORY:(?P<body>\s+qo_indptr_prefill_cpu = qo_indptr_prefill_cpu\.pin_memory\(\))",
            "if False:\\g<body>",
            present=source_contains("qo_indptr_prefill_cpu.pin_memory()"),
            must_fail=('test_plan_host_inputs_are_page_locked[mixed]', 'test_plan_host_inputs_are_page_locked[prefill-only]'),
        ),
        regression(
            "host_bound_under_speculation",
            "the native paths plan with the runner's host upper bound of seq_lens under speculative decoding too, "
            "where it runs ahead of a decode's real length (every draft of the previous step assumed accepted)",
            r"self\._num_speculative_tokens == 0\s+and (common_attn_metadata\.seq_lens_cpu_upper_bound is not None)",
            "\\1",
            present=source_contains("seq_lens_cpu = common_attn_metadata.seq_lens_cpu_upper_bound"),
            must_fail=('test_native_plans_match_reference[16]', 'test_poison_does_not_reach_the_kernels[native-native]'),
        ),
        regression(
            "trtllm_decode_lens_from_host_bound",
            "the TRTLLM decode kernel gets each request's length from the runner's host upper bound (copied up, no "
            "sync), which under speculative decoding runs ahead of its real length by the drafts rejected",
            r"(?P<lhs>seq_lens_decode = |seq_lens=)seq_lens\[:num_decodes\]",
            "\\g<lhs>common_attn_metadata.seq_lens_cpu_upper_bound[:num_decodes].to(seq_lens.device, "
            "non_blocking=True)",
            must_fail=('test_trtllm_fields_equal_reference[16]', 'test_poison_does_not_reach_the_kernels[trtllm-trtllm]'),
        ),
        regression(
            "dcp_shared_mutation",
            "under DCP, build() adjusts prefill lengths in the runner's host seq lens in place (no copy first)",
            r"\n[ \t]*seq_lens_cpu = seq_lens_cpu\.clone\(\)",
            "",
            present=source_contains("seq_lens_cpu = seq_lens_cpu.clone()"),
            must_fail=('test_rank_local_metadata_without_speculation[0-trtllm]', 'test_rank_local_metadata_without_speculation[1-native]'),
        ),
        regression(
            "dcp_global_pages",
            "under DCP, page counts and last-page lengths taken from the global lengths, not the rank's share",
            r"seq_lens_cpu = get_dcp_local_seq_lens\(",
            "_rank_local_seq_lens = get_dcp_local_seq_lens(",
            must_fail=('test_rank_local_metadata[world2-rank1-native]', 'test_rank_local_metadata[world4-rank3-native]'),
        ),
        regression(
            "dcp_decode_heads_of_the_rank",
            "under DCP, the native decode planned for the rank's own query heads, not the group's all-gathered ones",
            r"num_qo_heads=self\.num_qo_heads \* self\.dcp_world_size,",
            "num_qo_heads=self.num_qo_heads,",
            must_fail=('test_rank_local_metadata[world2-rank0-native]', 'test_rank_local_metadata[world4-rank3-native]'),
        ),
        regression(
            "dcp_combine_offsets_dropped",
            "under DCP, the TRTLLM decode metadata leaves out the query offsets the group's combine of partial "
            "results reads (dcp_query_start_loc)",
            r"qo_indptr\[: num_decodes \+ 1\] if self\.use_dcp else None",
            "None",
            present=source_contains("dcp_query_start_loc=("),
            must_fail=('test_rank_local_metadata[world2-rank0-trtllm]', 'test_rank_local_metadata[world4-rank3-trtllm]'),
        ),
        regression(
            "native_prefill_kv_heads_of_the_query",
            "the native prefill planned with the query's head count as the KV cache's (a GQA layer read as MHA)",
            r"num_kv_heads=self\.num_kv_heads,\n(\s*)head_dim_qk=self\.head_dim,",
            r"num_kv_heads=self.num_qo_heads,\n\1head_dim_qk=self.head_dim,",
            must_fail=('test_native_plans_carry_the_layers_attention',),
        ),
        regression(
            "native_decode_window_dropped",
            "the native decode planned without the layer's sliding window (attends to the whole context)",
            r'(pos_encoding_mode="NONE",\s*sm_scale=self\.sm_scale,\s*)window_left=self\.window_left,',
            r"\1window_left=-1,",
            must_fail=('test_native_plans_carry_the_layers_attention',),
        ),
        regression(
            "non_causal_prefill_planned_causal",
            "a non-causal batch (a DFlash drafter's) planned as a causal native prefill: each draft position stops "
            "seeing the ones after it",
            r"causal=attn_metadata\.causal,\n(\s*)sm_scale",
            r"causal=True,\n\1sm_scale",
            present=source_contains("causal=attn_metadata.causal"),
            must_fail=('test_non_causal_batch_is_planned_non_causal_for_every_request[16]',
                       'test_non_causal_batch_is_planned_non_causal_for_every_request[64]'),
        ),
        regression(
            "non_causal_drafter_claims_uniform_batch_graphs",
            "a non-causal drafter's layers claim UNIFORM_BATCH CUDA graphs on Blackwell, while build() plans their "
            "uniform batches on the native prefill wrapper, which no graph captures (vLLM PR #48167)",
            r" and \(not use_non_causal or is_xqa_arch\)",
            "",
            present=source_contains("not use_non_causal or is_xqa_arch"),
            must_fail=("test_uniform_batch_graphs_claimed_only_where_build_keeps_them_on_trtllm_decode[non-causal-sm100]",),
        ),
        regression(
            "xqa_non_causal_drafts_masked_causal",
            "on Hopper, a non-causal drafter's speculative decodes handed XQA a causal draft mask: each draft token "
            "stops seeing the drafts after it",
            r"(_get_decode_mask\(\s*q_len_per_req,\s*ragged_q_lens,\s*num_decodes,\s*)bool\(causal\),",
            r"\g<1>True,",
            present=source_contains("_get_decode_mask("),
            must_fail=("test_xqa_draft_mask_lets_each_query_see_its_requests_drafts[non-causal]",),
        ),
        regression(
            "xqa_ragged_mask_past_own_drafts",
            "on Hopper, ragged speculative decodes' XQA draft mask lets a request's query tokens attend one draft "
            "column past its own query length",
            r"bool_mask = kv_idx < row_lens\.unsqueeze\(1\)",
            "bool_mask = kv_idx <= row_lens.unsqueeze(1)",
            present=source_contains("bool_mask = kv_idx < row_lens.unsqueeze(1)"),
            # causal rows stop at their own position anyway: only a non-causal batch can show it
            must_fail=("test_xqa_draft_mask_lets_each_query_see_its_requests_drafts[non-causal]",),
        ),
        regression(
            "xqa_ragged_query_offsets_shifted",
            "on Hopper, ragged speculative decodes hand XQA query offsets one request late: each decode reads the "
            "next request's query tokens",
            r"(q_lens = decode_q_lens\.tolist\(\)\s*return \(\s*q_len_per_req,\s*)qo_indptr\[: num_decodes \+ 1\],",
            r"\g<1>qo_indptr[1 : num_decodes + 2],",
            present=source_contains("q_lens = decode_q_lens.tolist()"),
            must_fail=("test_xqa_draft_mask_lets_each_query_see_its_requests_drafts[causal]",
                       "test_xqa_draft_mask_lets_each_query_see_its_requests_drafts[non-causal]"),
        ),
        regression(
            "fp8_prefill_tables_cut_short",
            "with an FP8 KV cache and a bf16 query, the TRTLLM prefill handed floor(longest prefill / page) block-table "
            "columns: the last, partly filled page of the longest prefill is never dequantized",
            r": cdiv\(max_prefill_seq_len, page_size\)",
            ": max_prefill_seq_len // page_size",
            present=source_contains("cdiv(max_prefill_seq_len, page_size)"),
            must_fail=('test_fp8_kv_cache_stays_on_trtllm_without_host_sync[16-bf16-query]',
                       'test_fp8_kv_cache_stays_on_trtllm_without_host_sync[64-bf16-query]'),
        ),
        regression(
            "mla_prefill_host_sync",
            "the MLA prefill path copies the device seq_lens to the host (.cpu()) instead of reading the runner's "
            "host upper bound: a host sync per step with MTP and chunked prefill",
            r"seq_lens_cpu = common_attn_metadata\.seq_lens_cpu_upper_bound",
            "seq_lens_cpu = common_attn_metadata.seq_lens.cpu()",
            target=MLA_COMMON,
            must_fail=('test_build_does_not_sync[FLASHINFER_MLA-mixed]', 'test_build_does_not_sync[FLASHINFER_MLA-prefill-only-chunked]'),
        ),
        regression(
            "mla_context_counts_queries",
            "the MLA prefill's context gathered from the cache includes this step's query tokens (seq lens that "
            "already count them get them added once more before the queries are subtracted)",
            r"\n(?P<indent>[ \t]*)seq_lens_cpu = common_attn_metadata\.seq_lens_cpu_upper_bound\n",
            "\n\\g<indent>seq_lens_cpu = common_attn_metadata.seq_lens_cpu_upper_bound\n"
            "\\g<indent>seq_lens_cpu = seq_lens_cpu + (query_start_loc_cpu[1:] - query_start_loc_cpu[:-1])\n",
            target=MLA_COMMON,
            must_fail=('test_fields_equal_reference[FLASHINFER_MLA-mixed]', 'test_fields_equal_reference[FLASHINFER_MLA-mixed-long-context]'),
        ),
        regression(
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
            must_fail=('test_poison_does_not_reach_the_kernels[FLASHINFER_MLA]', 'test_fields_equal_reference[FLASHINFER_MLA-decode-only]'),
        ),
        regression(
            "mla_decode_query_bound_lost",
            "the MLA decode metadata promises its kernel one query token per decode (max_query_len=1) whatever "
            "the speculative decodes hold: a varlen decode kernel (FlashInfer MLA) takes its single-token path",
            r"max_query_len=min\(\s*common_attn_metadata\.max_query_len, self\.reorder_batch_threshold\s*\),",
            "max_query_len=1,",
            target=MLA_COMMON,
            present=source_contains("max_query_len=min("),
            must_fail=('test_fields_equal_reference[FLASHINFER_MLA-mixed]', 'test_random_batches[FLASHINFER_MLA]'),
        ),
        regression(
            "mla_chunk_reads_another_chunks_lens",
            "an MLA context chunk hands its prefill kernel the KV lengths at its requests' batch positions in the "
            "flat list of every chunk's lengths: from the second chunk on, another chunk's lengths",
            r"seq_lens=seq_lens_cpu\[request_slice\],",
            "seq_lens=seq_lens_cpu[plan.request_start : plan.request_end],",
            target=MLA_COMMON, definition="build_mla_chunked_context_metadata",
            present=source_contains("seq_lens=seq_lens_cpu[request_slice],"),
            must_fail=('test_prefill_kernel_calls_equal_reference[FLASHINFER_MLA-mixed-long-context]',),
        ),
        # The control: vLLM's source compiled into a copy unchanged. The tier must stay green on it.
        regression("none", "no change (control for the copying itself)", r"\A", ""),
    ]
}


# The regressions of PR #39546's own two bugs; the tests they must turn red run first (pytest_plugin).
PR_39546 = ("old_guard", "stale_indptr")


def closest_to_pr_39546() -> frozenset[str]:
    """The tests (``function[parameters]``) that PR #39546's regressions must turn red."""
    return frozenset(test for name in PR_39546 for test in REGRESSIONS[name].must_fail)
