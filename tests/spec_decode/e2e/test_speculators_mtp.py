"""Speculators-format checkpoints and MTP through vLLM's LLM on B200: greedy output, acceptance, mixed batches, no host sync in build().

Cases come from spec_decode_e2e.yaml (suite `speculators_mtp`); the checks are shared (checks.SuiteTests)."""

from tests.spec_decode.e2e.checks import SuiteTests


class TestSpeculatorsMtp(SuiteTests):
    suite = "speculators_mtp"
