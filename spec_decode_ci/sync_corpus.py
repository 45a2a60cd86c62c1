"""Small torch snippets, each with the verdict CUDA's sync debug mode gives it on a GPU.

The CPU half of test_sentinel_corpus.py requires the host-sync sentinel to give the same verdicts on a
CPU; the GPU half requires ``torch.cuda.set_sync_debug_mode("error")`` to give them on a GPU, and checks
them a second way: the host waits behind a queued GPU spin exactly when the snippet syncs. Pure torch: no
vLLM needed on the GPU machine. Verdicts were taken on an H200 with torch 2.11.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch


@dataclass(frozen=True)
class Snippet:
    name: str
    syncs: bool  # what CUDA's sync debug mode says on a GPU (and whether the host waits behind queued work)
    run: Callable[[SimpleNamespace], object]


def inputs(device: torch.device, make_device: Callable[[torch.Tensor], torch.Tensor]) -> SimpleNamespace:
    """Device tensors (made through ``make_device``, which tags them on a CPU) and host tensors."""
    host = torch.arange(8, dtype=torch.int32)
    pinned = host.pin_memory() if device.type == "cuda" else host.clone()
    return SimpleNamespace(
        a=make_device(torch.arange(16, dtype=torch.int32)),
        lens=make_device(torch.tensor([5, 16, 17, 33], dtype=torch.int32)),
        f=make_device(torch.linspace(0, 1, 16)),
        mask=make_device(torch.tensor([True, False] * 8)),
        buf=make_device(torch.zeros(9, dtype=torch.int64)),
        host=host, pinned=pinned, device=device,
    )


def _set_slice_from_host(t):
    t.buf[1:] = t.host


def _cumsum_into_out_slice(t):
    t.buf[:1] = 0
    torch.cumsum((t.lens + 15) // 16, dim=0, out=t.buf[1:5])


CORPUS: list[Snippet] = [
    # No sync: work stays on the device.
    Snippet("add", False, lambda t: t.a + 1),
    Snippet("mul_inplace", False, lambda t: t.f.mul_(2)),
    Snippet("slice_view", False, lambda t: t.a[2:9]),
    Snippet("index_with_int", False, lambda t: t.a[3]),
    Snippet("ceil_div", False, lambda t: (t.lens + 15) // 16),
    Snippet("cumsum", False, lambda t: torch.cumsum(t.lens, dim=0)),
    Snippet("cumsum_into_out_slice", False, _cumsum_into_out_slice),
    Snippet("fill_slice_with_scalar", False, lambda t: t.buf[:1].fill_(0)),
    Snippet("setitem_scalar", False, lambda t: t.buf.__setitem__(slice(0, 1), 0)),
    Snippet("max_reduction_on_device", False, lambda t: t.lens.max()),
    Snippet("any_on_device", False, lambda t: torch.any(t.mask)),
    Snippet("where", False, lambda t: torch.where(t.mask, t.a, 0)),
    Snippet("gather_with_device_index", False, lambda t: t.a[t.lens % 16]),
    Snippet("clone", False, lambda t: t.a.clone()),
    Snippet("dtype_cast", False, lambda t: t.a.to(torch.float32)),
    Snippet("to_same_device", False, lambda t: t.a.to(t.device)),
    Snippet("copy_from_pinned_non_blocking", False, lambda t: t.buf[:8].copy_(t.pinned, non_blocking=True)),
    Snippet("to_host_non_blocking", False, lambda t: t.a.to("cpu", non_blocking=True)),
    Snippet("repeat_interleave_with_output_size", False,
            lambda t: torch.repeat_interleave(t.a[:4], t.lens, output_size=71)),
    Snippet("sort", False, lambda t: torch.sort(t.f)),
    Snippet("shape_arithmetic", False, lambda t: t.a.shape[0] * 2 + t.a.numel()),
    Snippet("masked_fill", False, lambda t: t.a.masked_fill(t.mask, 0)),
    # Sync: the host needs a value, or an output size, from the device.
    Snippet("item", True, lambda t: t.a[3].item()),
    Snippet("max_item", True, lambda t: t.lens.max().item()),
    Snippet("tolist", True, lambda t: t.a.tolist()),
    Snippet("cpu", True, lambda t: t.a.cpu()),
    Snippet("to_host_blocking", True, lambda t: t.a.to("cpu")),
    Snippet("bool_of_tensor", True, lambda t: bool(t.mask.any())),
    Snippet("int_of_tensor", True, lambda t: int(t.a[1])),
    Snippet("float_of_tensor", True, lambda t: float(t.f[1])),
    Snippet("if_on_tensor", True, lambda t: 1 if (t.a > 3).all() else 0),
    Snippet("slice_bound_from_tensor", True, lambda t: t.a[: t.lens[0]]),
    Snippet("nonzero", True, lambda t: torch.nonzero(t.a)),
    Snippet("boolean_mask_index", True, lambda t: t.a[t.mask]),
    Snippet("masked_select", True, lambda t: torch.masked_select(t.a, t.mask)),
    Snippet("unique", True, lambda t: torch.unique(t.lens)),
    Snippet("repeat_interleave_without_output_size", True, lambda t: torch.repeat_interleave(t.a[:4], t.lens)),
    Snippet("torch_equal", True, lambda t: torch.equal(t.a, t.a.clone())),  # the same tensor twice short-cuts
    Snippet("copy_into_host_blocking", True, lambda t: t.host.copy_(t.a[:8])),
    Snippet("copy_from_host_blocking", True, lambda t: t.buf[:8].copy_(t.host)),
    Snippet("setitem_from_host_tensor", True, _set_slice_from_host),
]
