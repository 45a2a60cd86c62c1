"""spec_decode_ci.install_vllm: an exact pin the registry does not serve is replaced by the nearest served
version (newer first), every other requirement is kept as the release wrote it."""

from __future__ import annotations

import pytest

from spec_decode_ci import install_vllm

METADATA = """Metadata-Version: 2.1
Name: vllm
Version: 0.34.0
Requires-Dist: torch==2.14.0
Requires-Dist: flashinfer-python==0.7.3
Requires-Dist: numpy
Requires-Dist: tokenspeed-mla==2.0.3; platform_system == "Linux"
Requires-Dist: pytest; extra == "test"
"""
SERVED = {"torch": ["2.14.1", "2.14.0", "2.13.0"], "flashinfer-python": ["0.7.4", "0.7.2.post1", "0.7.2"],
          "tokenspeed-mla": ["2.0.2"]}


def test_unserved_pins_are_replaced_by_the_nearest_served_version():
    requirements = install_vllm.runtime_requirements(METADATA)
    assert requirements == ["torch==2.14.0", "flashinfer-python==0.7.3", "numpy",
                            'tokenspeed-mla==2.0.3; platform_system == "Linux"']
    out, replaced = install_vllm.replace_unserved_pins(requirements, lambda name: SERVED[name])
    assert out == ["torch==2.14.0", "flashinfer-python==0.7.4", "numpy",
                   'tokenspeed-mla==2.0.2; platform_system == "Linux"']
    assert replaced == ["flashinfer-python==0.7.3 is not served; installing 0.7.4 (nearest)",
                        "tokenspeed-mla==2.0.3 is not served; installing 2.0.2 (nearest)"]


def test_nearest_prefers_the_next_newer_release():
    assert install_vllm.nearest_served("0.7.3", ["0.7.2.post1", "0.8.0", "0.7.4"]) == "0.7.4"
    assert install_vllm.nearest_served("0.7.3", ["0.7.2.post1", "0.7.1"]) == "0.7.2.post1"
    assert install_vllm.nearest_served("0.7.3", []) is None


def test_a_pin_with_nothing_served_stops_with_its_name():
    with pytest.raises(SystemExit, match="serves no version of flashinfer-python"):
        install_vllm.replace_unserved_pins(["flashinfer-python==0.7.3"], lambda name: [])


@pytest.mark.parametrize("argv", [["nightly"], ["0.34.0", "--index-url", "https://example.invalid/"], ["latest"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        install_vllm.main(argv)
    assert exit_info.value.code == 2 and "error:" in capsys.readouterr().err
