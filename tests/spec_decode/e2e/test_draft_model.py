"""Draft model through vLLM's LLM on B200: greedy output, acceptance, mixed batches, no host sync in build().

Cases come from spec_decode_ci/e2e/cases.yaml (suite `draft_model`); the checks are shared (checks.SuiteTests)."""

from spec_decode_ci.e2e.checks import SuiteTests


class TestDraftModel(SuiteTests):
    suite = "draft_model"
