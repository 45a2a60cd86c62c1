"""The GPU self-check's breaks: each changes vLLM's speculative decoding (rejection sampler, drafters, model
runners V1 and V2) where the e2e suites must see it on the GPU smoke's tiny models."""

from __future__ import annotations

from spec_decode_ci import compat
from spec_decode_ci.patches.record import gpu_break

V1, V2 = compat.V1_RUNNER, compat.V2_RUNNER
V2_SPEC = "vllm.v1.worker.gpu.spec_decode"
# V2's autoregressive drafting (EAGLE, EAGLE-3, MTP) since 0.33; 0.26 kept all of it, and 0.34 keeps its
# multi-step decode, in the autoregressive speculator (in 0.34 the base class of both drafters).
V2_AR = f"{V2_SPEC}.target_dependent_ar.speculator"
V2_AR_OTHER_HOMES = (f"{V2_SPEC}.autoregressive.speculator",)
PROPOSE_FIRST_LINE_V2 = r"(?s)(def propose\(.*?\n)(?P<indent>[ \t]*)num_reqs = input_batch\.num_reqs\n"
PROPOSE_SYNC_V2 = "\\1\\g<indent>num_reqs = input_batch.num_reqs\n\\g<indent>_first_token = int(last_sampled[0].item())\n"

GPU_BREAKS = {b.name: b for b in [
    gpu_break("accept_every_draft",
              "the greedy rejection sampler compares each draft token with itself: every draft is accepted",
              "vllm.v1.sample.rejection_sampler",
              r"target_argmax = target_logits\.argmax\(dim=-1\)",
              "target_argmax = draft_token_ids.to(target_logits.device)",
              "test_eagle", ("test_greedy_output_matches_target[tiny-llama-eagle3]",), runner=V1),
    gpu_break("accept_every_draft_v2",
              "the rejection sampler verifies each draft against logits that favour the draft token itself: every "
              "draft is accepted",
              f"{V2_SPEC}.rejection_sampler",
              r"sampled, num_sampled = rejection_sample\(\s*processed_logits,",
              "sampled, num_sampled = rejection_sample(\n"
              "            processed_logits.scatter(-1, draft_sampled.long().view(-1, 1), 1.0e4),",
              "test_eagle", ("test_greedy_output_matches_target[tiny-llama-eagle3]",), runner=V2),
    gpu_break("eagle_hidden_states_shifted",
              "the drafter reads the target's hidden states one position late",
              "vllm.v1.spec_decode.llm_base_proposer",
              r"self\.hidden_states\[:num_tokens\] = target_hidden_states",
              "self.hidden_states[:num_tokens] = torch.roll(target_hidden_states, 1, 0)",
              "test_eagle", ("test_acceptance[tiny-llama-eagle3]",), runner=V1),
    gpu_break("eagle_hidden_states_shifted_v2",
              "the drafter reads the target's hidden states one position late",
              V2_AR, r"self\.hidden_states\[:(?P<n>num_tokens(?:_padded)?)\]\.copy_\(hidden_states\)",
              "self.hidden_states[:\\g<n>].copy_(torch.roll(hidden_states, 1, 0))",
              "test_eagle", ("test_acceptance[tiny-llama-eagle3]",), runner=V2, other_homes=V2_AR_OTHER_HOMES),
    gpu_break("draft_kv_slot_shifted_v2",
              "the drafter's later proposals of a step write their KV two slots late (their positions stay right): "
              "the next proposal's previous token is past the slots it reads (one slot late stays unseen: a key "
              "carries its RoPE position and still lies within the slots the next proposal reads)",
              V2_AR, r"(self\.block_tables\.compute_slot_mappings\(\s*(?:self\.)?idx_mapping(?:\[:\s*num_reqs\])?,"
                     r"\s*(?:self\.input_buffers\.)?query_start_loc(?:\[:\s*num_reqs \+ 1\])?,\s*)"
                     r"(?P<positions>(?:self\.input_buffers\.)?positions(?:\[:\s*num_reqs\])?),",
              "\\g<1>\\g<positions> + 2,",
              "test_eagle", ("test_acceptance[tiny-llama-eagle1]",), runner=V2, other_homes=V2_AR_OTHER_HOMES,
              everywhere=True),
    gpu_break("host_sync_in_build",
              "FlashInfer's build() reads the longest sequence back to the host (.item()) on every call",
              "vllm.v1.attention.backends.flashinfer",
              r"\n(?P<indent>[ \t]*)max_seq_len = common_attn_metadata\.max_seq_len\n",
              "\n\\g<indent>max_seq_len = common_attn_metadata.max_seq_len\n"
              "\\g<indent>_longest = int(common_attn_metadata.seq_lens.max().item())\n",
              # Not the step check on Hopper: there it allows build()'s syncs (native phases plan on the host);
              # the build check holds them to one per build(). On Blackwell's all-TRTLLM batches both would fail.
              "test_draft_model", ("test_mixed_batches_without_host_sync[tiny-llama-self]",)),
    gpu_break("native_pages_of_another_request",
              "FlashInfer's native attention takes each request's KV pages from the previous request's block-table "
              "row: the target alone reads another request's cache as much as the speculative run does",
              "vllm.v1.attention.backends.flashinfer",
              r"(_copy_page_indices_kernel\[\(num_reqs,\)\]\(\s*paged_kv_indices,\s*)block_table_tensor,",
              "\\g<1>block_table_tensor.roll(1, 0),",
              "test_draft_model", ("test_target_follows_its_weights[tiny-llama-self]",)),
    gpu_break("host_sync_in_propose",
              "the drafter's propose() reads a sampled token back to the host (.item()) on every step",
              "vllm.v1.spec_decode.llm_base_proposer",
              r"(?s)(def propose\(.*?\n)(?P<indent>[ \t]*)batch_size = common_attn_metadata\.batch_size\(\)\n",
              "\\1\\g<indent>batch_size = common_attn_metadata.batch_size()\n"
              "\\g<indent>_first_token = int(next_token_ids[0].item())\n",
              "test_draft_model", ("test_no_host_sync_in_the_speculative_step[tiny-llama-self]",), runner=V1),
    gpu_break("host_sync_in_propose_v2",
              "the drafter's propose() reads a sampled token back to the host (.item()) on every step",
              V2_AR, PROPOSE_FIRST_LINE_V2, PROPOSE_SYNC_V2,
              "test_eagle", ("test_no_host_sync_in_the_speculative_step[tiny-llama-eagle3]",), runner=V2,
              other_homes=V2_AR_OTHER_HOMES),
    gpu_break("host_sync_in_draft_model_propose_v2",
              "the draft model's propose() reads a sampled token back to the host (.item()) on every step",
              f"{V2_SPEC}.standalone_ar.speculator", PROPOSE_FIRST_LINE_V2, PROPOSE_SYNC_V2,
              "test_draft_model", ("test_no_host_sync_in_the_speculative_step[tiny-llama-self]",), runner=V2),
    gpu_break("drafter_positions_off_by_one",
              "the drafter runs its later proposals of a step one position late (RoPE positions +1; the KV slots "
              "stay right)",
              "vllm.v1.spec_decode.llm_base_proposer",
              r'"positions": self\._get_positions\(input_batch_size\),',
              '"positions": self._get_positions(input_batch_size) + 1,',
              "test_eagle", ("test_acceptance[tiny-llama-eagle1]",), runner=V1),
    gpu_break("drafter_positions_off_by_one_v2",
              "the drafter's positions move one further before each later proposal of a step",
              V2_AR,
              r"\n(?P<indent>[ \t]*)last_hidden_states, hidden_states = self\._run_model\(\s*num_tokens_padded,",
              "\n\\g<indent>self.input_buffers.positions[:num_reqs] += 1"
              "\n\\g<indent>last_hidden_states, hidden_states = self._run_model(\n\\g<indent>    num_tokens_padded,",
              "test_eagle", ("test_acceptance[tiny-llama-eagle1]",), runner=V2, other_homes=V2_AR_OTHER_HOMES),
    gpu_break("spec_decode_batches_without_graphs_v2",
              "the CUDA-graph manager dispatches no graph for uniform batches of more than one query token a request "
              "(the target's spec-decode batches run eagerly; vLLM issue 49547's kind of silent loss of speed)",
              f"{V2.rsplit('.', 1)[0]}.cudagraph_utils",
              r"if self\._graphs_captured and num_tokens > 0 and key in self\._candidates:",
              "if self._graphs_captured and num_tokens > 0 and key in self._candidates and not (uniform_token_count "
              "or 0) > 1:",
              "test_eagle", ("test_cuda_graph_mode_at_least_the_matrixs[tiny-llama-eagle3]",), runner=V2),
    gpu_break("mtp_drops_the_token",
              "the MTP layer drops the embedding of the token it drafts after",
              "vllm.model_executor.models.mimo_mtp",
              r"inputs_embeds = self\.token_layernorm\(inputs_embeds\)",
              "inputs_embeds = self.token_layernorm(torch.zeros_like(inputs_embeds))",
              "test_speculators_mtp", ("test_acceptance[tiny-mimo-mtp]",)),
    gpu_break("draft_vocab_unmapped",
              "EAGLE-3 drafters with a draft vocabulary skip its draft-to-target mapping (d2t)",
              "vllm.model_executor.models.llama_eagle3",
              r"targets = base \+ self\.draft_id_to_target_id",
              "targets = base",
              "test_speculators_mtp", ("test_acceptance[tiny-llama-speculators-eagle3]",)),
]}
