"""The emulated GPUs are the hardware matrix's: each reports the compute capability and SM count of its device
there, and a device that says too little is refused with the file and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spec_decode_ci import emulation
from spec_decode_ci.capabilities import find_checkout
from spec_decode_ci.emulation import BLACKWELL, HOPPER, NoEmulatedGpu, emulated_gpu

PACKAGED = Path(emulation.__file__).with_name("hardware_matrix.yaml")


def test_blackwell_and_hopper_are_sm100_and_sm90():
    assert BLACKWELL.capability[0] == 10 and HOPPER.capability[0] == 9
    assert BLACKWELL.trtllm_prefill and BLACKWELL.trtllm_decode and not BLACKWELL.page_locking


def matrix_with(tmp_path: Path, old: str, new: str) -> Path:
    text = PACKAGED.read_text()
    assert re.search(old, text), old
    path = tmp_path / "hardware_matrix.yaml"
    path.write_text(re.sub(old, new, text, count=1))
    return path


def test_an_emulated_gpu_reports_what_its_matrix_device_says(tmp_path):
    path = matrix_with(tmp_path, r'(b200:\n(?:    .*\n)*?    compute_capability: )"10\.0"\n    sm_count: \d+',
                       r'\g<1>"10.3"\n    sm_count: 160')
    gpu = emulated_gpu(emulation.BLACKWELL_DEVICE, path)
    assert (gpu.capability, gpu.sm_count) == ((10, 3), 160)
    assert gpu.name.startswith("sm103[")


def test_a_device_without_its_sm_count_is_refused_by_file_and_key(tmp_path):
    path = matrix_with(tmp_path, r"(b200:\n(?:    .*\n)*?)    sm_count: \d+\n", r"\g<1>")
    with pytest.raises(NoEmulatedGpu, match=rf"{re.escape(str(path))}: devices\.b200\.sm_count: expected it"):
        emulated_gpu("b200", path)
    with pytest.raises(NoEmulatedGpu, match=r"devices\.b300: expected the device"):
        emulated_gpu("b300", path)


def test_the_package_carries_the_checkouts_matrix():
    checkout = find_checkout()
    if checkout is None:
        pytest.skip("needs the spec-decode-ci checkout (the installed package's matrix is all there is)")
    assert PACKAGED.read_bytes() == (checkout / "hardware_matrix.yaml").read_bytes()
