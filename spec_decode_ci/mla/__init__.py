"""vLLM's MLA metadata builders (DeepSeek-style attention, which MTP speculation runs on B200) under the harness."""
