"""Eagle (EAGLE-1 and EAGLE-3 heads) through vLLM's LLM on B200 (tiny EAGLE-3 head in the GPU smoke): greedy output,
acceptance, mixed batches, no host sync in build().

Cases come from spec_decode_ci/e2e/cases.yaml (suite `eagle`); the checks are shared (checks.SuiteTests)."""

from spec_decode_ci.e2e.checks import SuiteTests


class TestEagle(SuiteTests):
    suite = "eagle"
