"""Torch snippets, each with the verdict CUDA's sync debug mode gives it on a GPU.

The corpus is built systematically (``generated()``): every indexing form (int, slice, tensor, bool mask,
ellipsis, None, tuples of them) x every value kind (Python scalar, host 0-dim and n-dim tensor, pinned tensor,
device tensor) for get and set; in-place and out-of-place ops with scalars or host tensors; factories with
``device=``; copies in both directions, pinned and pageable, blocking and not; plus the hand-picked ops that
read values or data-dependent sizes (``OPS``). The verdicts were measured on an H200 (``python -m
spec_decode_ci.sync.corpus --record FILE`` there) and are kept in ``verdicts.json`` beside it; a snippet the GPU
rejects (a device or shape error) has no verdict and is not in ``CORPUS``.

The CPU half of test_sentinel_corpus.py requires the host-sync sentinel to give the recorded verdicts on a CPU;
the GPU half requires CUDA's sync debug mode to give them on a GPU. Pure torch: no vLLM needed on the GPU.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import torch

VERDICTS_PATH = Path(__file__).with_name("verdicts.json")


@dataclass(frozen=True)
class Snippet:
    name: str
    syncs: bool  # what CUDA's sync debug mode says on a GPU (and whether the host waits behind queued work)
    run: Callable[[SimpleNamespace], object]


def inputs(device: torch.device, make_device: Callable[[torch.Tensor], torch.Tensor]) -> SimpleNamespace:
    """Device tensors (made through ``make_device``, which tags them on a CPU), host tensors and pinned host
    tensors (plain host tensors on a CPU: page-locking needs a CUDA driver)."""
    pin = (lambda x: x.pin_memory()) if device.type == "cuda" else (lambda x: x.clone())
    host = torch.arange(8, dtype=torch.int32)
    return SimpleNamespace(
        a=make_device(torch.arange(16, dtype=torch.int32)),
        m=make_device(torch.arange(16, dtype=torch.int32).reshape(4, 4)),
        lens=make_device(torch.tensor([5, 16, 17, 33], dtype=torch.int32)),
        f=make_device(torch.linspace(0, 1, 16)),
        mask=make_device(torch.tensor([True, False] * 8)),
        mask4=make_device(torch.tensor([True, False, True, False])),
        idx=make_device(torch.tensor([1, 3, 5])),
        buf=make_device(torch.zeros(9, dtype=torch.int64)),
        dev_0d=make_device(torch.tensor(7, dtype=torch.int32)),
        dev_1=make_device(torch.tensor([7], dtype=torch.int32)),
        host=host, pinned=pin(host),
        host_0d=torch.tensor(7, dtype=torch.int32), host_1=torch.tensor([7], dtype=torch.int32),
        pinned_0d=pin(torch.tensor(7, dtype=torch.int32)), pinned_1=pin(torch.tensor([7], dtype=torch.int32)),
        host_idx=torch.tensor([1, 3, 5]), host_mask=torch.tensor([True, False] * 8),
        host_idx_0d=torch.tensor(3), dev_idx_0d=make_device(torch.tensor(3)),
        device=device,
    )


def _set_slice_from_host(t):
    t.buf[1:] = t.host


def _cumsum_into_out_slice(t):
    t.buf[:1] = 0
    torch.cumsum((t.lens + 15) // 16, dim=0, out=t.buf[1:5])


OPS: list[Snippet] = [
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


# --- the generated families -----------------------------------------------------------------------------

# Index forms of the 1-D device tensor ``a`` (16 elements) and of the 2-D ``m`` (4 x 4).
INDEXES: dict[str, Callable[[SimpleNamespace], object]] = {
    "int": lambda t: 3, "negative_int": lambda t: -1, "slice": lambda t: slice(2, 9),
    "step_slice": lambda t: slice(None, None, 2), "ellipsis": lambda t: ..., "none": lambda t: None,
    "int_list": lambda t: [1, 3, 5], "device_long": lambda t: t.idx, "host_long": lambda t: t.host_idx,
    "device_bool": lambda t: t.mask, "host_bool": lambda t: t.host_mask, "device_0d": lambda t: t.dev_idx_0d,
    "host_0d": lambda t: t.host_idx_0d,
}
TUPLE_INDEXES: dict[str, Callable[[SimpleNamespace], tuple]] = {
    "int,int": lambda t: (1, 2), "int,slice": lambda t: (1, slice(0, 2)), "slice,int": lambda t: (slice(0, 2), 1),
    "ellipsis,int": lambda t: (..., 1), "none,slice": lambda t: (None, slice(1, 3)),
    "device_long,slice": lambda t: (t.idx[:2], slice(0, 2)), "device_long,device_long": lambda t: (t.idx[:2], t.idx[:2]),
    "host_long,int": lambda t: (t.host_idx[:2], 1), "device_bool,slice": lambda t: (t.mask4, slice(0, 2)),
    "device_0d,int": lambda t: (t.dev_idx_0d, 1),
}
VALUES: dict[str, Callable[[SimpleNamespace], object]] = {
    "python_int": lambda t: 7, "host_0d": lambda t: t.host_0d, "host_1": lambda t: t.host_1,
    "pinned_0d": lambda t: t.pinned_0d, "pinned_1": lambda t: t.pinned_1, "device_0d": lambda t: t.dev_0d,
    "device_1": lambda t: t.dev_1,
}
ELEMENTWISE: dict[str, Callable[[torch.Tensor, object], object]] = {
    "add_": lambda a, v: a.add_(v), "mul_": lambda a, v: a.mul_(v), "fill_": lambda a, v: a.fill_(v),
    "clamp_min_": lambda a, v: a.clamp_(min=v), "add": lambda a, v: a + v, "eq": lambda a, v: a == v,
    "maximum": lambda a, v: torch.maximum(a, v), "where": lambda a, v: torch.where(a > 3, a, v),
    "full_like": lambda a, v: torch.full_like(a, v),
}
FACTORIES: dict[str, Callable[[SimpleNamespace], object]] = {
    "tensor_from_list": lambda t: torch.tensor([1, 2, 3], device=t.device),
    "tensor_from_int": lambda t: torch.tensor(3, device=t.device),
    "tensor_empty_list": lambda t: torch.tensor([], device=t.device),
    "as_tensor_from_list": lambda t: torch.as_tensor([1, 2, 3], device=t.device),
    "as_tensor_from_host": lambda t: torch.as_tensor(t.host, device=t.device),
    "as_tensor_from_pinned": lambda t: torch.as_tensor(t.pinned, device=t.device),
    "zeros": lambda t: torch.zeros(4, dtype=torch.int32, device=t.device),
    "empty": lambda t: torch.empty(4, dtype=torch.int32, device=t.device),
    "full_python_int": lambda t: torch.full((4,), 7, dtype=torch.int32, device=t.device),
    "arange": lambda t: torch.arange(4, device=t.device),
    "linspace": lambda t: torch.linspace(0, 1, 4, device=t.device),
    "zeros_like": lambda t: torch.zeros_like(t.a), "ones_like": lambda t: torch.ones_like(t.a),
    "empty_like": lambda t: torch.empty_like(t.a),
}


def _copies() -> dict[str, Callable[[SimpleNamespace], object]]:
    out: dict[str, Callable[[SimpleNamespace], object]] = {}
    for blocking in (True, False):
        nb, tag = not blocking, "blocking" if blocking else "non_blocking"
        for src in ("host", "pinned"):
            out[f"device.copy_({src}).{tag}"] = lambda t, s=src, nb=nb: t.a[:8].copy_(getattr(t, s), non_blocking=nb)
            out[f"{src}.copy_(device).{tag}"] = lambda t, s=src, nb=nb: getattr(t, s).copy_(t.a[:8], non_blocking=nb)
            out[f"{src}.to(device).{tag}"] = lambda t, s=src, nb=nb: getattr(t, s).to(t.device, non_blocking=nb)
            out[f"{src}_0d.to(device).{tag}"] = lambda t, s=src, nb=nb: getattr(t, f"{s}_0d").to(t.device,
                                                                                                  non_blocking=nb)
        out[f"device.to(cpu).{tag}"] = lambda t, nb=nb: t.a.to("cpu", non_blocking=nb)
        out[f"device_0d.to(cpu).{tag}"] = lambda t, nb=nb: t.dev_0d.to("cpu", non_blocking=nb)
    out["device.cpu()"] = lambda t: t.a.cpu()
    out["device.to(device)"] = lambda t: t.a.to(t.device)
    out["device.to(dtype)"] = lambda t: t.a.to(torch.int64)
    return out


def _setter(index, value):
    def run(t):
        i = index(t)
        (t.m if isinstance(i, tuple) else t.a)[i] = value(t)
    return run


def _getter(index):
    return lambda t: (t.m if isinstance(index(t), tuple) else t.a)[index(t)]


def generated() -> dict[str, Callable[[SimpleNamespace], object]]:
    """Every generated snippet, by name (verdicts are looked up by these names)."""
    out: dict[str, Callable[[SimpleNamespace], object]] = {}
    for iname, index in {**INDEXES, **{f"({k})": v for k, v in TUPLE_INDEXES.items()}}.items():
        out[f"get[{iname}]"] = _getter(index)
        for vname, value in VALUES.items():
            out[f"set[{iname}]={vname}"] = _setter(index, value)
    for oname, op in ELEMENTWISE.items():
        for vname, value in VALUES.items():
            out[f"{oname}({vname})"] = lambda t, op=op, value=value: op(t.a, value(t))
    out.update({f"factory.{k}": v for k, v in FACTORIES.items()})
    out.update({f"copy.{k}": v for k, v in _copies().items()})
    return out


def measure(run: Callable[[SimpleNamespace], object]) -> bool | str:
    """On a GPU: whether CUDA's sync debug mode ("error") flags the snippet, or the error it raises otherwise."""
    from spec_decode_ci.sync import CUDA_SYNC_WARNING

    device = torch.device("cuda")
    t = inputs(device, lambda x: x.to(device))
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run(t)
        return False
    except RuntimeError as exc:
        if CUDA_SYNC_WARNING in str(exc):
            return True
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    except Exception as exc:  # a shape or type error: the snippet is not valid on a GPU
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    finally:
        torch.cuda.set_sync_debug_mode(previous)
        torch.cuda.synchronize()


def _all_snippets() -> dict[str, Callable[[SimpleNamespace], object]]:
    return {**{s.name: s.run for s in OPS}, **generated()}


def load_verdicts(path: Path = VERDICTS_PATH) -> dict[str, bool | str]:
    return json.loads(path.read_text())["verdicts"] if path.exists() else {}


def corpus(verdicts: dict[str, bool | str] | None = None) -> list[Snippet]:
    """The snippets with a recorded sync / no-sync verdict (ones the GPU rejects are left out)."""
    verdicts = load_verdicts() if verdicts is None else verdicts
    return [Snippet(name, verdicts[name], run) for name, run in _all_snippets().items()
            if isinstance(verdicts.get(name), bool)]


def unrecorded() -> list[str]:
    """Snippets without any recorded outcome: measure them on a GPU."""
    verdicts = load_verdicts()
    return [name for name in _all_snippets() if name not in verdicts]


CORPUS = corpus()


def record(path: Path) -> None:
    """Measure every snippet on this machine's GPU and write the verdicts (with what measured them) to ``path``."""
    verdicts = {name: measure(run) for name, run in _all_snippets().items()}
    path.write_text(json.dumps({
        "measured_on": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "verdicts": verdicts}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--record":
        sys.exit("usage: python -m spec_decode_ci.sync.corpus --record FILE   (on a machine with a CUDA GPU)")
    record(Path(sys.argv[2]))
