"""Which matrix device this machine is, and whether it offers the capabilities a test needs.

A CI step says so in its environment (``SPEC_DECODE_CI_DEVICE`` and ``SPEC_DECODE_CI_CAPABILITIES``, written
by the generator from the matrix). Elsewhere the device is recognised from the GPU's name and, where MIG slices
of one GPU differ, its memory, against the hardware matrix (``$SPEC_DECODE_CI_MATRIX`` or
``hardware_matrix.yaml`` in the working directory or a parent) — never from the compute capability alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from spec_decode_ci.generator.names import CAPABILITIES_ENV, DEVICE_ENV, MATRIX_NAME, matrix_above

MATRIX_ENV = "SPEC_DECODE_CI_MATRIX"
PACKAGED_MATRIX = Path(__file__).with_name(MATRIX_NAME)  # the hardware matrix the package carries
MEMORY_TOLERANCE = 0.15  # a GPU reports somewhat less memory than its nominal size


class AmbiguousDevice(ValueError):
    """More than one matrix device fits this machine."""


@dataclass(frozen=True)
class Machine:
    device: str | None
    capabilities: frozenset[str]
    how: str  # how the device was found, for skip reasons


def find_matrix(start: Path | None = None) -> Path | None:
    named = os.environ.get(MATRIX_ENV)
    if named:
        return Path(named)
    return matrix_above(start or Path.cwd())


def find_checkout() -> Path | None:
    """The spec-decode-ci checkout this runs in (where its hardware matrix is), or None from an install alone."""
    matrix = find_matrix()
    return matrix.parent if matrix is not None else None


def match_device(matrix, gpu_name: str | None, memory_gib: float | None) -> str | None:
    """The one device of ``matrix`` whose `gpu_name` is in ``gpu_name`` (and whose `memory_gib` fits, where
    devices share a GPU); a CPU-only machine is the device with `gpus_per_agent: 0`. Ambiguity is an error."""
    if gpu_name is None:
        found = [n for n, d in matrix.devices.items() if d.gpus_per_agent == 0]
    else:
        found = [n for n, d in matrix.devices.items() if d.gpu_name and d.gpu_name.lower() in gpu_name.lower()]
        if len(found) > 1 and memory_gib is not None:
            fits = [n for n in found if matrix.devices[n].memory_gib is not None
                    and abs(memory_gib - matrix.devices[n].memory_gib) <= MEMORY_TOLERANCE * matrix.devices[n].memory_gib]
            found = fits or found
    if len(found) > 1:
        what = f"GPU {gpu_name!r} with {memory_gib:.0f} GiB" if gpu_name else "a machine without a GPU"
        raise AmbiguousDevice(f"{what} matches devices {', '.join(found)} of the hardware matrix; "
                              f"tell them apart (gpu_name, memory_gib) or set {DEVICE_ENV}")
    return found[0] if found else None


def _local_gpu() -> tuple[str | None, float | None]:
    try:
        import torch
    except ImportError:
        return None, None
    if not torch.cuda.is_available():
        return None, None
    return torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory / 2**30


def this_machine() -> Machine:
    named = os.environ.get(DEVICE_ENV)
    listed = os.environ.get(CAPABILITIES_ENV)
    if named and listed is not None:
        return Machine(named, frozenset(c for c in listed.split(",") if c), f"{DEVICE_ENV}={named}")
    path = find_matrix()
    if path is None:
        return Machine(named, frozenset(), f"no {MATRIX_NAME} found and {CAPABILITIES_ENV} unset")
    from spec_decode_ci.generator.model import load_matrix  # the generator's model: imported where it is read

    matrix = load_matrix(path)
    if named:
        if named not in matrix.devices:
            raise ValueError(f"{DEVICE_ENV}={named!r} is not a device of {path}")
        device = named
    else:
        device = match_device(matrix, *_local_gpu())
    caps = frozenset(matrix.devices[device].capabilities) if device else frozenset()
    return Machine(device, caps, f"recognised from {path.name}" if device else f"not a device of {path.name}")


def device_record(machine: Machine | None = None):
    """The matrix's ``Device`` of this machine (the matrix found as for ``this_machine``, else the one the package
    carries), or None where this machine is no device of it."""
    machine = machine or this_machine()
    if machine.device is None:
        return None
    from spec_decode_ci.generator.model import load_matrix

    return load_matrix(find_matrix() or PACKAGED_MATRIX).devices.get(machine.device)


def missing(required: tuple[str, ...], machine: Machine | None = None) -> str | None:
    """Why a test needing ``required`` cannot run here (None when it can)."""
    machine = machine or this_machine()
    lacking = [c for c in required if c not in machine.capabilities]
    if not lacking:
        return None
    return (f"needs {', '.join(lacking)}; this machine is {machine.device or 'unknown'} ({machine.how}) and offers "
            f"{', '.join(sorted(machine.capabilities)) or 'none of them'}")
