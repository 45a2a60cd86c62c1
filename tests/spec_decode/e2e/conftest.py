"""Parametrizes each e2e suite class's tests with that suite's cases from spec_decode_e2e.yaml."""

from __future__ import annotations

from tests.spec_decode.e2e import cases


def pytest_generate_tests(metafunc):
    suite = getattr(metafunc.cls, "suite", None)
    if suite and "case" in metafunc.fixturenames:
        suite_cases = cases.load().cases(suite)
        metafunc.parametrize("case", suite_cases, ids=[c.id for c in suite_cases])
