"""Names the generator and the harness share: the matrix's file name, and the environment a suite step gets."""

MATRIX_NAME = "hardware_matrix.yaml"  # found in the working directory or a parent
# Written by the generator into each suite step's environment: which matrix device runs it, what it offers
# (read by spec_decode_ci.capabilities).
DEVICE_ENV, CAPABILITIES_ENV = "SPEC_DECODE_CI_DEVICE", "SPEC_DECODE_CI_CAPABILITIES"
