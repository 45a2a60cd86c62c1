"""What every backend's builder options share: the speculation and scheduler settings vLLM's config is made with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SpecDecodeOptions:
    num_spec_tokens: int = 3  # 0: no speculation
    max_num_seqs: int = 64
    max_model_len: int = 4096

    def engine_kwargs(self, model_dir: Path, block_size: int, speculation: dict[str, Any]) -> dict[str, Any]:
        """``EngineArgs`` for a tiny local model (no tokenizer, bf16) with these settings, speculating by
        ``speculation`` (its method and keys) where ``num_spec_tokens`` is not 0."""
        kwargs: dict[str, Any] = dict(model=str(model_dir), skip_tokenizer_init=True, block_size=block_size,
                                      max_num_seqs=self.max_num_seqs, max_model_len=self.max_model_len,
                                      dtype="bfloat16")
        if self.num_spec_tokens:
            kwargs["speculative_config"] = {**speculation, "num_speculative_tokens": self.num_spec_tokens}
        return kwargs
