"""The all-TRTLLM guard. Which metadata each phase gets; no host sync when every phase is TRTLLM, at most one
(the copy of ``seq_lens`` the native paths plan with) otherwise. Whether the native paths' host lengths are right
is the reference tests' verdict: the runner's host upper bound runs ahead of decodes' real lengths there.

PR #39546's first bug: a mixed prefill + decode batch that runs entirely on TRTLLM still copied
``seq_lens`` to the host, because the guard only exempted decode-only batches.
"""

from __future__ import annotations

import itertools

import pytest

from spec_decode_ci import compat
from spec_decode_ci.buildpath.batches import spec_decode_batch
from spec_decode_ci.emulation import BLACKWELL

pytestmark = pytest.mark.build_path

CASES = [
    (p, d, pt, dt)
    for p, d, pt, dt in itertools.product([True, False], [True, False], ["trtllm", "native"], ["trtllm", "native"])
    if p or d
]

PREFILL_TYPE = {"trtllm": compat.TRTLLM_PREFILL_CLASS, "native": "FIPrefill"}
DECODE_TYPE = {"native": "FIDecode"}  # the TRTLLM decode class's name changed across releases


def case_id(case) -> str:
    """e.g. ``prefill=yes-trtllm,decode=no-native``: presence, then the kernel that phase would use."""
    p, d, pt, dt = case
    return f"prefill={'yes' if p else 'no'}-{pt},decode={'yes' if d else 'no'}-{dt}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_guard(build_harness, case):
    has_prefill, has_decode, prefill_path, decode_path = case
    gpu = BLACKWELL.variant(trtllm_prefill=prefill_path == "trtllm", trtllm_decode=decode_path == "trtllm")
    harness = build_harness(gpu=gpu)
    k = harness.options.num_spec_tokens
    # A decode has at most the builder's reorder threshold of query tokens: 1 + k with a TRTLLM decode, else 1.
    batch = spec_decode_batch(3 if has_decode else 0, 2 if has_prefill else 0, k, harness.options.page_size,
                              seed=7, decode_query_len=harness.decode_threshold)
    result = harness.build(batch, watch_syncs=True)
    m = result.metadata

    assert (m.num_decodes, m.num_prefills) == (3 if has_decode else 0, 2 if has_prefill else 0), batch.describe()
    assert type(m.prefill).__name__ == (PREFILL_TYPE[prefill_path] if has_prefill else "NoneType")
    decode_types = {**DECODE_TYPE, "trtllm": harness.trtllm_decode_class}
    assert type(m.decode).__name__ == (decode_types[decode_path] if has_decode else "NoneType")

    if result.cuda_syncs is not None:  # on a GPU, CUDA's sync debug mode must see what the sentinel saw
        assert len(result.cuda_syncs) == len(result.syncs), (result.cuda_syncs, result.syncs)
    all_trtllm = (not has_prefill or prefill_path == "trtllm") and (not has_decode or decode_path == "trtllm")
    if all_trtllm:
        assert result.syncs == [], "all-TRTLLM batch synced:\n" + "\n".join(map(str, result.syncs))
    else:
        # The native paths plan with seq_lens on the host: at most one device-to-host copy, in build().
        assert len(result.syncs) <= 1, "\n".join(map(str, result.syncs))
        for sync in result.syncs:
            assert "device-to-host" in sync.op and ("build" in sync.site or "build" in sync.callers), sync
