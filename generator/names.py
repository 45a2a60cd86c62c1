"""Names the generator and the harness share: the matrix's file name and where it is found, and the environment a
suite step gets."""

from pathlib import Path

MATRIX_NAME = "hardware_matrix.yaml"  # found in the working directory or a parent
# Written by the generator into each suite step's environment: which matrix device runs it, what it offers
# (read by spec_decode_ci.capabilities).
DEVICE_ENV, CAPABILITIES_ENV = "SPEC_DECODE_CI_DEVICE", "SPEC_DECODE_CI_CAPABILITIES"
# A nightly suite step compares its results with those of the build this names (set by the pipeline's schedule).
BASELINE_BUILD_ENV = "SPEC_DECODE_CI_BASELINE_BUILD"
RESULTS_OPTION = "--spec-decode-results"  # the harness plugin's pytest option that writes a run's results file
RESULTS_DIR = "spec-decode-results"  # where suite steps write their results files (spec_decode_ci.results)


def file_above(start: Path, relative: Path | str) -> Path | None:
    """The file ``relative`` in directory ``start`` or in the nearest of its parents that has one."""
    return next((d / relative for d in (start, *start.parents) if (d / relative).is_file()), None)


def matrix_above(start: Path) -> Path | None:
    """The hardware matrix in directory ``start`` or in the nearest of its parents that has one."""
    return file_above(start, MATRIX_NAME)
