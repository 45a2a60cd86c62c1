"""Capability markers resolved against hardware_matrix.yaml, the same file the pipeline is generated from.

``@pytest.mark.requires("trtllm_prefill")`` runs where the machine offers that capability and skips
elsewhere with a reason naming what is missing and which matrix devices have it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from generator.load import read_document
from generator.model import Matrix, parse_matrix

MATRIX_PATH = Path(__file__).resolve().parents[2] / "hardware_matrix.yaml"
# Which matrix device this machine is, when CI says so (a step can set it in its env).
DEVICE_ENV = "SPEC_DECODE_CI_DEVICE"


@lru_cache(maxsize=1)
def matrix() -> Matrix:
    return parse_matrix(read_document(MATRIX_PATH))


def detect_device() -> str | None:
    """The matrix device this machine matches: by $SPEC_DECODE_CI_DEVICE, else by CUDA compute capability."""
    named = os.environ.get(DEVICE_ENV)
    if named:
        if named not in matrix().devices:
            raise ValueError(f"{DEVICE_ENV}={named!r} is not a device of {MATRIX_PATH.name}")
        return named
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return next((n for n, d in matrix().devices.items() if d.gpus_per_agent == 0), None)
    major, minor = torch.cuda.get_device_capability()
    for name, device in matrix().devices.items():
        if device.compute_capability == f"{major}.{minor}":
            return name
    return None


def missing(required: tuple[str, ...], device: str | None) -> str | None:
    """Why a test needing ``required`` cannot run on ``device`` (None when it can)."""
    m = matrix()
    unknown = [c for c in required if c not in m.capabilities]
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; {MATRIX_PATH.name} declares {sorted(m.capabilities)}")
    have = set(m.devices[device].capabilities) if device else set()
    lacking = [c for c in required if c not in have]
    if not lacking:
        return None
    where = {c: ", ".join(m.devices_with(c)) or "no device" for c in lacking}
    return f"needs {', '.join(f'{c} (on {where[c]})' for c in lacking)}; this machine is " + (
        f"'{device}'" if device else "not a device of hardware_matrix.yaml")
