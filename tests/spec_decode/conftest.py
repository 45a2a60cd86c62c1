"""Shared fixtures and gating for the spec-decode suites."""

from __future__ import annotations

import importlib.util

import pytest

from tests.spec_decode import capabilities

VLLM_MARKERS = {"build_path", "selfcheck", "e2e", "e2e_offline"}


def pytest_collection_modifyitems(config, items):
    device = capabilities.detect_device()
    has_vllm = importlib.util.find_spec("vllm") is not None
    for item in items:
        marker = item.get_closest_marker("requires")
        if marker is not None:
            reason = capabilities.missing(tuple(marker.args), device)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
        if not has_vllm and VLLM_MARKERS & {m.name for m in item.iter_markers()}:
            item.add_marker(pytest.mark.skip(reason="vLLM is not installed (pip install -e '.[build-path]')"))


@pytest.fixture(scope="session")
def harness_cache():
    """One real builder per (options, emulated GPU): building vLLM's config costs a second each."""
    from tests.spec_decode import regressions
    from tests.spec_decode.build_harness import BuildHarness

    cache: dict = {}
    module = regressions.requested()  # the self-check runs the tier against a regressed copy of vLLM's module

    def get(options=None, gpu=None) -> BuildHarness:
        from tests.spec_decode.builder_factory import BuilderOptions
        from tests.spec_decode.emulated_platform import BLACKWELL

        from tests.spec_decode.emulated_platform import UnsupportedEmulation

        key = (options or BuilderOptions(), gpu or BLACKWELL)
        if key not in cache:
            try:
                cache[key] = BuildHarness(*key, module=module)
            except UnsupportedEmulation as exc:
                pytest.skip(str(exc))
        return cache[key]

    return get
