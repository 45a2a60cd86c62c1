"""Host-sync sentinel: on a CPU, flag every operation that would force a GPU→CPU sync if the tagged tensors
lived on a GPU.

Tensors that would live on the GPU are tagged (``sentinel.tag``); a ``TorchFunctionMode`` propagates the
tag to everything computed from them and records, with its call site, each operation on a tagged tensor
that needs its value on the host: ``.item()``, ``.tolist()``, ``.numpy()``, ``bool/int/float()``,
``.cpu()``, blocking ``.to("cpu")`` / ``copy_`` into a host tensor, and the ops whose output size depends
on the data (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``, ...). It knows nothing of
vLLM's ``gpu_sync_allowed()``: an allowed sync is still a sync, and is counted.

Pure torch (no vLLM import), so the same module runs on a GPU machine where ``torch.cuda.set_sync_debug_mode``
gives the ground truth it is checked against (tests/spec_decode/test_sentinel_corpus.py).
"""

from __future__ import annotations

import traceback
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

T = torch.Tensor

# Calls that hand a device value to Python: the host must wait for the GPU.
_VALUE_TO_HOST = {
    T.item, T.tolist, T.numpy, T.__bool__, T.__int__, T.__float__, T.__index__, T.__complex__,
    T.__repr__, T.__str__, T.__format__, T.__array__,
    torch.equal, torch.allclose, torch.is_nonzero,
}
# Ops whose output shape depends on the data: the host reads a count back before it can allocate.
_DATA_DEPENDENT_SHAPE = {
    torch.nonzero, T.nonzero, torch.argwhere, T.argwhere, torch.masked_select, T.masked_select,
    torch.unique, T.unique, torch.unique_consecutive, T.unique_consecutive,
    torch.bincount, T.bincount,
}
_HOST_COPY = {T.cpu}
_TO = {T.to}
_COPY = {T.copy_}
_INDEX = {T.__getitem__}
_SETITEM = {T.__setitem__}
_REPEAT_INTERLEAVE = {torch.repeat_interleave, T.repeat_interleave}
_WHERE = {torch.where, T.where}
_FILL_VALUE_READ = {torch.full_like}
_FROM_DATA = {torch.tensor, torch.as_tensor}  # host data copied to ``device=``


@dataclass(frozen=True)
class SyncEvent:
    op: str
    site: str  # "file:line in function" of the innermost frame outside torch and this module
    callers: tuple[str, ...] = ()  # the function names of the frames above it, innermost first

    @property
    def function(self) -> str:
        """The function of the innermost frame: the one that made the sync."""
        return self.site.rsplit(" in ", 1)[-1]

    def __str__(self) -> str:
        return f"{self.op} at {self.site}"


@dataclass
class HostSyncSentinel(TorchFunctionMode):
    """Use as a context manager; ``events`` lists the would-be syncs in order."""

    events: list[SyncEvent] = field(default_factory=list)
    # On a CPU the emulated GPU is the host too: `.to(x)` counts as staying on the device when `x` is one of
    # these objects (the builder's device), and as a move to the host for any other CPU device or "cpu".
    device_objects: tuple[torch.device, ...] = ()

    def __post_init__(self) -> None:
        super().__init__()
        self._tagged: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._paused = 0

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stand-ins for GPU kernels run their reference on the host here; a kernel launch is not a sync."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    # -- tagging ----------------------------------------------------------------------------------

    def tag(self, *tensors: Any) -> None:
        """Mark tensors as living on the GPU (views taken later inherit the mark)."""
        for t in tree_flatten(list(tensors))[0]:
            if isinstance(t, torch.Tensor):
                self._tagged[t] = True

    def is_tagged(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t in self._tagged

    def _any_tagged(self, args: Any, kwargs: Any) -> bool:
        return any(self.is_tagged(a) for a in tree_flatten((args, kwargs))[0])

    # -- the mode ---------------------------------------------------------------------------------

    def __enter__(self):
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._paused:
            return func(*args, **kwargs)
        tagged_input = self._any_tagged(args, kwargs)
        onto_device = self._onto_device(func, args, kwargs)
        if tagged_input or onto_device:
            reason = self._sync_reason(func, args, kwargs) if tagged_input else self._upload_reason(func, args, kwargs)
            if reason:
                self._record(reason)
        out = func(*args, **kwargs)
        moves_to_host = tagged_input and self._moves_to_host(func, args, kwargs)
        if (moves_to_host or onto_device) and isinstance(out, torch.Tensor) and (
                self.is_tagged(out) or out is (args[0] if args else None)):
            out = out.clone()  # on a CPU a transfer may return its input; a real one makes a copy on the other side
        if (tagged_input and not moves_to_host) or onto_device:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self._tagged[t] = True
        return out

    def _onto_device(self, func, args, kwargs) -> bool:
        """A host value made into a device tensor: a factory given ``device=`` the device, or ``.to(device)`` of a
        host tensor."""
        if self._is_device(kwargs.get("device")):
            return True
        return func in _TO and bool(args) and not self.is_tagged(args[0]) and self._is_device(self._to_target(args,
                                                                                                            kwargs))

    def _is_device(self, target: Any) -> bool:
        return target is not None and any(target is d for d in self.device_objects)

    @staticmethod
    def _upload_reason(func, args, kwargs) -> str | None:
        if func in _TO and not _to_non_blocking(args, kwargs):
            return "Tensor.to(device) of a host tensor (blocking host-to-device copy)"
        if func in _FROM_DATA and args and _has_data(args[0]):
            return f"torch.{func.__name__}(host data, device=) (blocking host-to-device copy)"
        return None

    def _sync_reason(self, func, args, kwargs) -> str | None:
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        if func in _VALUE_TO_HOST:
            return f"{name} (value read on the host)"
        if func in _DATA_DEPENDENT_SHAPE:
            return f"{name} (data-dependent output size)"
        if func in _HOST_COPY:
            return "Tensor.cpu (blocking device-to-host copy)"
        if func in _TO and self._to_host(args, kwargs) and not _to_non_blocking(args, kwargs):
            return "Tensor.to(cpu) (blocking device-to-host copy)"
        if func in _COPY and self._into_host(args) and not _non_blocking(args, kwargs, position=2):
            return "Tensor.copy_ into a host tensor (blocking device-to-host copy)"
        if func in _COPY and self._from_host(args[0], args[1]) and not _non_blocking(args, kwargs, position=2):
            return "Tensor.copy_ from a host tensor (blocking host-to-device copy)"
        if func in (_INDEX | _SETITEM) and self._tagged_slice_bound(args[1]):
            return "slice bound read from a device tensor (value read on the host)"
        if func in _INDEX:
            return self._index_reason(args[0], args[1])
        if func in _SETITEM:
            return self._setitem_reason(*args[:3])
        if func in _REPEAT_INTERLEAVE and self._repeats_from_data(args, kwargs):
            return "repeat_interleave without output_size (data-dependent output size)"
        if func in _WHERE and any(isinstance(a, torch.Tensor) and not self.is_tagged(a) and a.dim() == 0
                                  for a in tree_flatten((args, kwargs))[0]):
            return "torch.where with a host 0-dim tensor (blocking host-to-device copy)"
        if func in _FILL_VALUE_READ and self.is_tagged(kwargs.get("fill_value", args[1] if len(args) > 1 else None)):
            return f"{name} with a device fill value (value read on the host)"
        return None

    def _index_kind(self, index: Any) -> str:
        """How the index reaches the device: ``host_data`` (a list or host index tensor, copied over),
        ``device_scalar`` (a 0-dim device integer, read as a Python int), ``device_mask``, ``advanced`` (a device
        index tensor or host mask) or ``basic`` (ints, slices, ellipsis, None)."""
        items = index if isinstance(index, tuple) else (index,)
        kinds = set()
        for i in items:
            if isinstance(i, list):
                kinds.add("host_data")
            elif isinstance(i, torch.Tensor):
                if self.is_tagged(i):
                    kinds.add("device_mask" if i.dtype == torch.bool else
                              "device_scalar" if i.dim() == 0 else "advanced")
                elif i.dtype != torch.bool and i.dim() > 0:
                    kinds.add("host_data")
                elif i.dtype == torch.bool:
                    kinds.add("advanced")
        return next((k for k in ("host_data", "device_scalar", "device_mask", "advanced") if k in kinds), "basic")

    def _index_reason(self, tensor: Any, index: Any) -> str | None:
        if not self.is_tagged(tensor):
            return None
        return {
            "host_data": "indexing with a host list or index tensor (blocking host-to-device copy)",
            "device_scalar": "indexing with a 0-dim device tensor (value read on the host)",
            "device_mask": "boolean-mask indexing (data-dependent output size)",
        }.get(self._index_kind(index))

    def _setitem_reason(self, dest: Any, index: Any, value: Any) -> str | None:
        device_value = self.is_tagged(value)
        if not self.is_tagged(dest):
            return "assignment of a device value into a host tensor (blocking copy)" if device_value else None
        kind = self._index_kind(index)
        if kind == "host_data":
            return "assignment through a host list or index tensor (blocking host-to-device copy)"
        if kind == "device_scalar":
            return "assignment through a 0-dim device index (value read on the host)"
        if kind == "device_mask":
            return "boolean-mask assignment of a device value (data-dependent index)" if device_value else None
        if device_value:
            return None
        if kind == "advanced" or self._selects_one_element(dest, index):
            # index_put_ / copy_ into one element: the host value is uploaded from pageable memory
            return "assignment of a host value through an element or index tensor (blocking host-to-device copy)"
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return "assignment of a host tensor into a device tensor (blocking host-to-device copy)"
        return None  # a scalar into a slice is a fill on the device

    def _selects_one_element(self, dest: torch.Tensor, index: Any) -> bool:
        with self.paused():
            return dest[index].dim() == 0

    def _into_host(self, args) -> bool:
        return not self.is_tagged(args[0]) and self.is_tagged(args[1])

    def _from_host(self, dest: Any, src: Any) -> bool:
        """A device tensor filled from a host tensor that is more than a scalar."""
        return self.is_tagged(dest) and isinstance(src, torch.Tensor) and not self.is_tagged(src) and src.dim() > 0

    def _moves_to_host(self, func, args, kwargs) -> bool:
        if func in _VALUE_TO_HOST or func in _HOST_COPY:
            return True
        if func in _COPY or func in _SETITEM:
            return not self.is_tagged(args[0])  # the destination decides where the result lives
        return func in _TO and self._to_host(args, kwargs)

    @staticmethod
    def _to_target(args, kwargs) -> Any:
        target = kwargs.get("device")
        for a in args[1:]:
            if isinstance(a, (str, torch.device)):
                target = a
            elif isinstance(a, torch.Tensor):
                target = a.device
        return target

    def _to_host(self, args, kwargs) -> bool:
        target = self._to_target(args, kwargs)
        if target is None or self._is_device(target):
            return False
        return torch.device(target).type == "cpu"

    def _tagged_slice_bound(self, index: Any) -> bool:
        items = index if isinstance(index, tuple) else (index,)
        return any(isinstance(i, slice) and any(self.is_tagged(b) for b in (i.start, i.stop, i.step)) for i in items)

    @staticmethod
    def _repeats_from_data(args, kwargs) -> bool:
        if kwargs.get("output_size") is not None or (len(args) > 3 and args[3] is not None):
            return False
        if len(args) == 1 and not {"repeats"} & set(kwargs):
            return True  # torch.repeat_interleave(repeats): output size is sum(repeats)
        repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
        return isinstance(repeats, torch.Tensor) and repeats.numel() > 1

    def _record(self, reason: str) -> None:
        frames = _frames_outside_torch()
        site = f"{frames[0].filename}:{frames[0].lineno} in {frames[0].name}" if frames else "<unknown>"
        self.events.append(SyncEvent(reason, site, tuple(f.name for f in frames[1:])))


_ACTIVE: list[HostSyncSentinel] = []


@contextmanager
def outside_sentinels() -> Iterator[None]:
    """Pause every active sentinel (for host stand-ins of GPU kernels)."""
    with ExitStack() as stack:
        for sentinel in list(_ACTIVE):
            stack.enter_context(sentinel.paused())
        yield


def _has_data(data: Any) -> bool:
    if isinstance(data, torch.Tensor):
        return data.numel() > 0
    return not isinstance(data, (list, tuple)) or len(data) > 0


def _non_blocking(args, kwargs, position: int) -> bool:
    return bool(kwargs.get("non_blocking", args[position] if len(args) > position else False))


def _to_non_blocking(args, kwargs) -> bool:
    """``Tensor.to``'s non_blocking, by keyword or positionally (its overloads put it at different places)."""
    return bool(kwargs.get("non_blocking") or any(a is True for a in args[1:]))


def _frames_outside_torch() -> list[traceback.FrameSummary]:
    """The caller's frames, innermost first, without torch's and this module's own."""
    here = __file__
    return [f for f in reversed(traceback.extract_stack()[:-3]) if f.filename != here and "/torch/" not in f.filename]
