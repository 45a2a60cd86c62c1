"""A machine is recognised as a matrix device from its GPU's name and memory, never the compute capability alone;
ambiguity is an error; a step's environment wins."""

from __future__ import annotations

import pytest

from spec_decode_ci import capabilities
from spec_decode_ci.capabilities import AmbiguousDevice, Machine, match_device
from spec_decode_ci.generator.load import parse_text
from spec_decode_ci.generator.model import parse_matrix
MATRIX_PATH = capabilities.find_matrix()
if MATRIX_PATH is None:
    pytest.skip(f"needs the checkout's {capabilities.MATRIX_NAME} (here or above, or ${capabilities.MATRIX_ENV})",
                allow_module_level=True)
MATRIX = parse_matrix(parse_text(MATRIX_PATH.read_text(encoding="utf-8"), "m.yaml"))


@pytest.mark.parametrize("gpu_name, memory, device", [
    ("NVIDIA H100 80GB HBM3", 79.2, "h100"),  # same compute capability as the H200
    ("NVIDIA H200", 139.8, "h200"),
    ("NVIDIA H200 MIG 3g.35gb", 32.5, "h200_35gb"),
    ("NVIDIA H200 MIG 2g.18gb", 16.2, "h200_18gb"),
    ("NVIDIA B200", 178.4, "b200"),
    (None, None, "cpu"),
    ("NVIDIA GeForce RTX 4090", 23.6, None),
])
def test_device_from_gpu_name_and_memory(gpu_name, memory, device):
    assert match_device(MATRIX, gpu_name, memory) == device


def test_ambiguity_is_an_error():
    with pytest.raises(AmbiguousDevice, match="matches devices h200, h200_35gb, h200_18gb"):
        match_device(MATRIX, "NVIDIA H200", 80.0)  # no H200 slice has 80 GiB


def test_step_environment_wins(monkeypatch):
    monkeypatch.setenv(capabilities.DEVICE_ENV, "b200")
    monkeypatch.setenv(capabilities.CAPABILITIES_ENV, "cuda,trtllm_prefill")
    machine = capabilities.this_machine()
    assert machine == Machine("b200", frozenset({"cuda", "trtllm_prefill"}), "SPEC_DECODE_CI_DEVICE=b200")
    assert capabilities.missing(("cuda",)) is None
    assert "needs trtllm_decode; this machine is b200" in capabilities.missing(("cuda", "trtllm_decode"))
