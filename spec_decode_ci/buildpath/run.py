"""Running a real metadata builder's ``build()`` and reading back what it produced, for any backend: the device
it runs on, the builder's persistent buffers (found by walking it) and their poisoning, the host-sync sentinel
around a build, and the records of what the kernels were handed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from spec_decode_ci.buildpath.batches import DeviceBatch
from spec_decode_ci.sync import HostSyncSentinel, cuda_sync_warnings


def builder_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


@dataclass
class PlanCall:
    wrapper: str
    kwargs: dict[str, Any]
    host_inputs_page_locked: dict[str, bool] = field(default_factory=dict)
    cuda_graph: bool = False  # the wrapper was made for CUDA-graph replay (FlashInfer's use_cuda_graph)


def _host_by_name(path: str) -> bool:
    """On a CPU every tensor is on the host; vLLM names its host-side buffers ``*_cpu*`` / ``.cpu``."""
    return "cpu" in re.split(r"[._\[\]']+", path)


def persistent_buffers(builder) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """Every tensor the builder keeps between batches, found by walking its attributes (not by name):
    yields (path, tensor, lives_on_device). A ``CpuGpuBuffer``-like object gives a host and a device half;
    a plain tensor is on the device if it is on a GPU or, on a CPU, unless its name says ``cpu``."""
    seen: set[int] = set()

    def walk(path: str, value: Any):
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            on_device = value.device.type != "cpu" if torch.cuda.is_available() else not _host_by_name(path)
            yield path, value, on_device
        elif isinstance(getattr(value, "cpu", None), torch.Tensor) and isinstance(getattr(value, "gpu", None),
                                                                                  torch.Tensor):
            yield f"{path}.cpu", value.cpu, False
            yield f"{path}.gpu", value.gpu, True
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from walk(f"{path}[{k!r}]", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                yield from walk(f"{path}[{i}]", v)

    for name, value in vars(builder).items():
        yield from walk(name, value)


def poison(builder, pattern: int) -> list[str]:
    """Fill every persistent buffer with garbage; returns the paths filled.

    One cell is restored: index 0 of a host-side ``*indptr`` buffer. vLLM writes host prefix sums from
    index 1 on and relies on index 0 keeping its construction-time 0 ("0-index is always 0" in
    flashinfer.py); no batch can change it, so garbage there would test nothing that can happen. The
    device halves are poisoned whole: the builder must write their index 0 itself (the PR's fix zeroes it).
    """
    filled = []
    for path, tensor, on_device in persistent_buffers(builder):
        if not tensor.numel():
            continue
        tensor.fill_(pattern & 0xFF if tensor.dtype == torch.uint8 else pattern)
        if not on_device and path.rsplit(".", 1)[0].endswith("indptr"):
            tensor[0] = 0
        filled.append(path)
    return filled


@dataclass
class BuildResult:
    metadata: Any
    device_batch: DeviceBatch
    plans: list[PlanCall]
    sentinel: HostSyncSentinel | None
    cuda_syncs: list[str] | None = None  # what CUDA's sync debug mode saw (GPU runs with a sentinel only)

    @property
    def syncs(self):
        return self.sentinel.events if self.sentinel else []


def run_build(builder, device_batch: DeviceBatch, device: torch.device, watch_syncs: bool):
    """``builder.build()`` on ``device_batch``: (metadata, sentinel or None, what CUDA's sync debug mode saw or None).

    With ``watch_syncs``, under a fresh host-sync sentinel (and, on a GPU, CUDA's sync debug mode). On a CPU
    a sentinel always runs: it keeps device and host apart, so a device-to-host copy returns a new tensor, as
    it does on a GPU, instead of the device tensor itself."""
    if not watch_syncs and device.type != "cpu":
        return builder.build(0, device_batch.common), None, None
    sentinel = HostSyncSentinel(device_objects=(device,))
    sentinel.tag(*device_batch.device_tensors.values())
    sentinel.tag(*(t for _, t, on_device in persistent_buffers(builder) if on_device))
    with sentinel, cuda_sync_warnings() as cuda_syncs:
        metadata = builder.build(0, device_batch.common)
    if not watch_syncs:
        return metadata, None, None
    return metadata, sentinel, cuda_syncs if device.type == "cuda" else None
