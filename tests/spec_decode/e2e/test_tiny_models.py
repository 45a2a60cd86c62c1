"""The GPU smoke's random-weight model keeps its greedy choices through bf16 rounding, so that comparing the
speculative run with the plain one tests speculation rather than numerics."""

from __future__ import annotations

import pytest

from tests.spec_decode.e2e import cases
from tests.spec_decode.e2e.engine_runner import prompts
from tests.spec_decode.e2e.tiny_models import write_weights

pytestmark = pytest.mark.e2e_offline
SMOKE = cases.load(str(cases.SMOKE_CONFIG_PATH))


def greedy(model_dir, dtype, token_prompts, steps):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).eval()
    out = []
    with torch.no_grad():
        for ids in token_prompts:
            seq = model.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
            out.append(seq[0, len(ids):].tolist())
    return out


@pytest.mark.parametrize("name,family", sorted(SMOKE.tiny_models.items()))
def test_greedy_survives_bf16(tmp_path, name, family):
    import torch

    model_dir = write_weights(tmp_path / name, family)
    token_prompts = [p["prompt_token_ids"] for p in prompts(SMOKE)]
    steps = SMOKE.max_tokens
    assert greedy(model_dir, torch.float32, token_prompts, steps) == greedy(model_dir, torch.bfloat16,
                                                                              token_prompts, steps)
