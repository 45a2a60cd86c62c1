"""Every host tensor ``build()`` hands to a FlashInfer wrapper's ``plan()`` for a non-blocking copy is page-locked
where the machine can page-lock (on a GPU: CUDA's ``is_pinned()``; on a CPU: emulated page-locking records what
vLLM pinned). One vLLM release handed ``plan()`` pageable buffers, so its "asynchronous" copies blocked the host.
"""

from __future__ import annotations

import pytest

from spec_decode_ci.emulation import BLACKWELL
from spec_decode_ci.buildpath.batches import spec_decode_batch

pytestmark = pytest.mark.build_path

# The native paths are the ones that plan(); page-locking available, as on every GPU machine.
NATIVE_PAGE_LOCKING = BLACKWELL.variant(trtllm_prefill=False, trtllm_decode=False, page_locking=True)


@pytest.mark.parametrize("decodes,prefills", [(3, 3), (4, 0), (0, 3)], ids=["mixed", "decode-only", "prefill-only"])
def test_plan_host_inputs_are_page_locked(build_harness, decodes, prefills):
    harness = build_harness(gpu=NATIVE_PAGE_LOCKING)
    batch = spec_decode_batch(decodes, prefills, harness.options.num_spec_tokens, harness.options.page_size,
                              seed=31, decode_query_len=harness.decode_threshold)
    result = harness.build(batch)
    assert result.plans, "the native paths planned nothing"
    for call in result.plans:
        assert call.host_inputs_page_locked, f"{call.wrapper}.plan() got none of the host inputs looked for"
        pageable = sorted(name for name, locked in call.host_inputs_page_locked.items() if not locked)
        assert not pageable, f"{call.wrapper}.plan() got pageable host memory for {pageable} ({batch.describe()})"
