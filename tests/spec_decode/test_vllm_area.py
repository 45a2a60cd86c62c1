"""vLLM's own spec-decode test-area file, found above the step's working directory (ci-infra runs test-area steps in
/vllm-workspace/tests, beside vLLM's checkout), says for each of vLLM's steps what the harness's matrix says: an
edit vLLM makes to its file is red the next morning with the step and the key named, and the annotation says what
to copy into the matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from spec_decode_ci.generator import load, model, upstream
from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.names import MATRIX_NAME, file_above
from spec_decode_ci.results import VLLM_AREA_DRIFT

AREA_FILE = Path(".buildkite") / "test_areas" / "spec_decode.yaml"


@pytest.mark.vllm_area
def test_vllm_area_file_says_what_the_matrix_says(record_property):
    """Per step of vLLM's file: kept; a changed key, an added or a removed step fails, naming them."""
    found = file_above(Path.cwd(), AREA_FILE)  # vLLM's file, above the step's working directory
    if found is None:
        pytest.skip(f"no {AREA_FILE} in {Path.cwd()} or above: run this in a vLLM checkout (its tests/ folder)")
    matrix_file = Path(model.__file__).parent.parent / MATRIX_NAME  # the matrix this package was generated from
    doc = load.read_document(matrix_file)
    try:
        drift = upstream.compare(model.parse_matrix(doc), load.read_document(found), doc.error)
    except InputError as exc:
        pytest.fail(f"expected vLLM's {found} to hold only keys ci-infra reads; came: {exc}. Look: the key's row in "
                    f"spec_decode_ci/generator/ci_infra_keys.py (ci-infra may have added it)", pytrace=False)
    record_property(VLLM_AREA_DRIFT, drift.as_figure())
    assert not drift.differs, (
        f"expected vLLM's {found} to say what the matrix {matrix_file} says for each of vLLM's steps; came:\n"
        f"{drift.text()}Look: `generate-pipeline upstream {found}` in a checkout of the harness prints the same")
