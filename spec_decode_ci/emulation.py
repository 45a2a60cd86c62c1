"""Emulated Blackwell (and Hopper): the only fakes of the build-path tier, all at the hardware boundary.

- the platform's device capability (the hardware matrix's ``compute_capability`` of the device emulated) and,
  on a machine without CUDA, its device type;
- which TRTLLM kernels the emulated GPU ships (per phase), and that their cubins are present
  (`has_nvidia_artifactory` would otherwise probe the network);
- on a machine without CUDA, that host memory cannot be page-locked, and the GPU's SM count (MLA builders size
  their scheduling buffers by it).

Everything above that boundary is vLLM's own code: ``supports_trtllm_attention`` still decides from the
emulated capability; the per-phase switch can only take a kernel away, never add one.
"""

from __future__ import annotations

import dataclasses
import weakref
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from spec_decode_ci import compat
from spec_decode_ci.backends import FLASHINFER_UTILS, vllm_modules
from spec_decode_ci.capabilities import PACKAGED_MATRIX


@dataclass(frozen=True)
class EmulatedGpu:
    capability: tuple[int, int]
    sm_count: int  # MLA builders size their scheduling buffers by it
    trtllm_prefill: bool = True
    trtllm_decode: bool = True
    # On a machine without CUDA: whether vLLM is told host memory can be page-locked (a CUDA driver's service).
    # Off, vLLM takes its pageable paths; on, it pins where it would on a GPU. Either way a pin vLLM asks for is
    # emulated (``PageLocking``), so code that pins unconditionally runs and what it pinned can be checked.
    page_locking: bool = False

    def variant(self, **changes) -> "EmulatedGpu":
        """This GPU with ``changes`` (which TRTLLM kernels it ships, whether host memory can be page-locked)."""
        return dataclasses.replace(self, **changes)

    @property
    def name(self) -> str:
        phases = f"prefill={'trtllm' if self.trtllm_prefill else 'native'}," \
                 f"decode={'trtllm' if self.trtllm_decode else 'native'}"
        return f"sm{self.capability[0]}{self.capability[1]}[{phases}]"


class NoEmulatedGpu(ValueError):
    """A matrix device the tier emulates says too little to emulate it."""


def emulated_gpu(device: str, matrix_path: Path | None = None) -> EmulatedGpu:
    """The GPU of hardware-matrix device ``device`` as the tier emulates it: the ``compute_capability`` and
    ``sm_count`` the matrix gives it (the matrix the package carries, unless ``matrix_path``)."""
    path = matrix_path or PACKAGED_MATRIX
    devices = _matrix_devices(path)
    if device not in devices:
        raise NoEmulatedGpu(f"{path}: devices.{device}: expected the device the build-path tier emulates")
    found = devices[device]
    for key in ("compute_capability", "sm_count"):
        if getattr(found, key) is None:
            raise NoEmulatedGpu(f"{path}: devices.{device}.{key}: expected it, an emulated GPU of {device} reports it")
    major, minor = found.compute_capability.split(".")
    return EmulatedGpu(capability=(int(major), int(minor)), sm_count=found.sm_count)


@lru_cache(maxsize=None)
def _matrix_devices(path: Path) -> dict:
    """The devices of the matrix at ``path``, read once however many GPUs are emulated from it."""
    from spec_decode_ci.generator.model import load_matrix

    return load_matrix(path).devices


# The matrix devices whose GPUs the build-path tier emulates: Blackwell, and Hopper (vLLM's TRTLLM-API decodes
# run on XQA there).
BLACKWELL_DEVICE, HOPPER_DEVICE = "b200", "h200"
BLACKWELL, HOPPER = emulated_gpu(BLACKWELL_DEVICE), emulated_gpu(HOPPER_DEVICE)


_PAGE_LOCKED: dict[int, "weakref.ref[torch.Tensor]"] = {}  # storage address -> a tensor owning it


class PageLocking(TorchFunctionMode):
    """Emulated page-locked host memory on a machine without CUDA (the driver's service): ``pin_memory=True`` and
    ``Tensor.pin_memory()`` give ordinary host memory that is remembered as page-locked; ``is_pinned()`` and
    ``is_page_locked`` answer from that record (views share their storage's answer)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.is_pinned:
            return is_page_locked(args[0])
        if func is torch.Tensor.pin_memory:
            return _remember(args[0].clone())  # the mode is off inside its own handler
        if kwargs.get("pin_memory") is True:
            return _remember(func(*args, **{**kwargs, "pin_memory": False}))
        return func(*args, **kwargs)


def _remember(tensor: torch.Tensor) -> torch.Tensor:
    _PAGE_LOCKED[tensor.untyped_storage().data_ptr()] = weakref.ref(tensor)
    return tensor


def is_page_locked(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s memory is page-locked: CUDA's answer, or the emulated record without CUDA."""
    if torch.cuda.is_available():
        return tensor.is_pinned()
    owner = _PAGE_LOCKED.get(tensor.untyped_storage().data_ptr())
    return owner is not None and owner() is not None


class GpuAllocationsOnHost(TorchFunctionMode):
    """On a machine without CUDA, memory asked for on the GPU is given on the host (some backend modules allocate
    GPU workspaces when imported); with CUDA, it does nothing."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and not torch.cuda.is_available() and torch.device(device).type == "cuda":
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


class UnsupportedEmulation(Exception):
    pass


def forget_gpu_answers(*modules) -> None:
    """Clears every ``functools`` cache among the functions of ``modules`` (the backends' ``gpu_answering``
    modules): some of them answer from the GPU's capability."""
    for module in modules:
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == module.__name__:
                value.cache_clear()


@contextmanager
def emulated_platform(gpu: EmulatedGpu = BLACKWELL, extra_modules=()) -> Iterator[EmulatedGpu]:
    """``extra_modules``: copies of vLLM's backend modules (self-check) that imported the same names."""
    import importlib

    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    fi_utils = importlib.import_module(FLASHINFER_UTILS)  # where vLLM decides whether TRTLLM kernels ship
    platform_cls = type(current_platform)
    real_supports = fi_utils.supports_trtllm_attention
    # Releases that ask once for both phases cannot emulate a GPU with only one phase's kernels.
    per_phase = compat.trtllm_availability_per_phase()
    if not per_phase and gpu.trtllm_prefill != gpu.trtllm_decode:
        raise UnsupportedEmulation(f"{gpu.name}: this vLLM has no per-phase TRTLLM availability to emulate")

    def supports_trtllm_attention(*args, **kwargs) -> bool:
        # Hardware boundary: the emulated GPU may lack a phase's TRTLLM kernel; vLLM's own rule decides the rest.
        is_prefill = kwargs.get("is_prefill", args[0] if args else False)
        shipped = gpu.trtllm_prefill if is_prefill else gpu.trtllm_decode
        return shipped and (real_supports(*args, **kwargs) if per_phase else real_supports())

    with ExitStack() as stack:
        # vLLM caches answers it derives from the GPU (supports_trtllm_attention is functools.cache'd): they are
        # forgotten on entering and on leaving, so no emulated GPU answers for another.
        answering = (*vllm_modules("gpu_answering"), *extra_modules)
        forget_gpu_answers(*answering)
        stack.callback(forget_gpu_answers, *answering)
        # Hardware boundary: report the emulated GPU's compute capability.
        stack.enter_context(mock.patch.object(
            platform_cls, "get_device_capability",
            classmethod(lambda cls, device_id=0: DeviceCapability(*gpu.capability))))
        if not torch.cuda.is_available():
            # Hardware boundary: a CPU-only box reports no device type, and vLLM's DeviceConfig then fails.
            stack.enter_context(mock.patch.object(platform_cls, "device_type", "cuda"))
            # Hardware boundary: a CUDA GPU runs CUDA graphs, so vLLM's config keeps its default graph mode and the
            # builders set up what graph replays read (CUDA-graph wrappers, their persistent buffers), as on a GPU.
            stack.enter_context(mock.patch.object(platform_cls, "support_static_graph_mode",
                                                  classmethod(lambda cls: True)))
            # Hardware boundary: page-locked host memory needs a CUDA driver; every place vLLM decides it says
            # what the emulated machine offers, and the pins vLLM asks for are emulated.
            available = gpu.page_locking
            stack.enter_context(mock.patch.object(platform_cls, "is_pin_memory_available",
                                                  classmethod(lambda cls: available)))
            # Hardware boundary: the SM count is a property of the GPU there is none of.
            stack.enter_context(mock.patch.object(platform_cls, "num_compute_units",
                                                  classmethod(lambda cls, device_id=0: gpu.sm_count)))
            for owner, name, value in compat.page_locking_switches((*vllm_modules("page_locking"), *extra_modules),
                                                                   available):
                stack.enter_context(mock.patch.object(owner, name, value))
            stack.enter_context(PageLocking())
        # Hardware boundary: TRTLLM cubins count as present (the real check downloads from NVIDIA).
        stack.enter_context(mock.patch.object(fi_utils, "has_nvidia_artifactory", lambda: True))
        for module in (*vllm_modules("kernel_probes"), *extra_modules):
            if hasattr(module, "supports_trtllm_attention"):
                stack.enter_context(mock.patch.object(module, "supports_trtllm_attention", supports_trtllm_attention))
        yield gpu
