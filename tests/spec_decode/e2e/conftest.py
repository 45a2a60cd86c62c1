"""Parametrizes each e2e suite class's tests with that suite's cases from spec_decode_e2e.yaml, and gives each
class its engine runs (one baseline and one speculative engine per case)."""

from __future__ import annotations

import pytest

from tests.spec_decode.e2e import cases


def pytest_generate_tests(metafunc):
    suite = getattr(metafunc.cls, "suite", None)
    if suite and "case" in metafunc.fixturenames:
        suite_cases = cases.load().cases(suite)
        metafunc.parametrize("case", suite_cases, ids=[c.id for c in suite_cases])


@pytest.fixture(scope="class")
def runs(tmp_path_factory):
    from tests.spec_decode.e2e.checks import CaseRuns

    return CaseRuns(cases.load(), tmp_path_factory.mktemp("tiny-models"))
