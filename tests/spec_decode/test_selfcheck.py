"""The tier catches the bugs it exists for: re-apply each regression (PR #39546's two, the later FlashInfer
and MLA builder bugs) to a copy of vLLM's module, run the build-path tier against it, and require red; the
unchanged copies must stay green."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from spec_decode_ci.buildpath.regressions import patched_backend
from spec_decode_ci.patches import REGRESSIONS
from spec_decode_ci.pytest_run import TIER_PRELOAD, ForkedPytest, regression_args, run_pytest

pytestmark = pytest.mark.selfcheck


@pytest.fixture(scope="module")
def tier_runs():
    """The tier's runs against the regressed copies, each a fresh pytest session forked from one process that
    imported vLLM once."""
    runs = ForkedPytest(preload=TIER_PRELOAD)
    yield runs
    runs.close()


def run_tier(tier_runs: ForkedPytest, regression: str) -> tuple[int, set[str], str]:
    """The build-path tier against regression ``regression``'s copy: only the tests it must turn red (they
    decide its verdict; the others' outcome says nothing about it), the whole tier for the control."""
    run = tier_runs.run(*REGRESSIONS[regression].suites, marker="build_path", extra=regression_args(regression),
                        only=REGRESSIONS[regression].must_fail)
    return run.returncode, run.red, run.tail()


class SelfCheckRefused(RuntimeError):
    """The tier is red on vLLM's module copied unchanged: a regression's red would say nothing."""


@pytest.fixture(scope="module")
def control(tier_runs):
    """The tier on the unchanged copy (regression ``none``), run once: (exit code, red tests, output tail)."""
    patched_backend("none")
    return run_tier(tier_runs, "none")


@pytest.fixture
def green_control(control):
    code, failed, tail = control
    if code != 0 or failed:
        raise SelfCheckRefused(
            f"the self-check gives no verdicts: its control (vLLM's module copied unchanged) is not green, so a "
            f"regression's red would say nothing. Red on the control: {sorted(failed) or f'exit {code}'}\n{tail}")


def test_control_is_green(control):
    """The tier stays green on vLLM's module compiled into a copy unchanged."""
    code, failed, tail = control
    assert code == 0 and not failed, tail


def module_with_the_code(regression: str):
    """The installed vLLM module ``regression`` edits; the test skips where this vLLM lacks the code it undoes."""
    original = importlib.import_module(REGRESSIONS[regression].module)
    if not REGRESSIONS[regression].present(original):
        pytest.skip(f"this vLLM lacks the code {regression!r} undoes: the bug it reintroduces either cannot arise "
                    f"here or is native to this release (the tier's own verdict says which)")
    return original


@pytest.mark.parametrize("regression", sorted(set(REGRESSIONS) - {"none"}))
def test_regression_applies_once_to_the_installed_vllm(regression):
    """Each regression's pattern names exactly one place in this vLLM's source where that code is present: a
    pattern that finds nothing (or several places) is the self-check's breakage, told apart from a verdict."""
    original = module_with_the_code(regression)
    places = len(re.findall(REGRESSIONS[regression].pattern, inspect.getsource(original)))
    assert places == 1, f"{regression}: its pattern matches {places} places in {original.__file__}"


@pytest.mark.parametrize("regression", sorted(set(REGRESSIONS) - {"none"}))
def test_tier_verdict_under_regression(regression, green_control, tier_runs):
    module_with_the_code(regression)
    unobservable = REGRESSIONS[regression].unobservable_here()
    if unobservable:
        pytest.skip(f"{regression!r} cannot show on this vLLM: {unobservable}")
    patched_backend(regression)  # fails here, clearly, if vLLM's code no longer has what the regression edits
    code, failed, tail = run_tier(tier_runs, regression)
    assert code == 1, tail
    missing = [t for t in REGRESSIONS[regression].must_fail if t not in failed]
    assert not missing, f"{regression}: expected red {missing}; red were {sorted(failed)}\n{tail}"


def test_an_unknown_regression_on_the_command_line_is_one_usage_line():
    """``--regression`` with a name that is no regression or mutant stops the run before any test (pytest's usage
    error, exit 4), naming what it accepts: never a tier silently run on vLLM's own module."""
    run = run_pytest("spec_decode_ci.suites.test_guard_truth_table", extra=(*regression_args("no_such"),
                                                                             "--collect-only"))
    assert run.returncode == 4 and "--regression no_such: 'no_such' is no regression or mutant" in run.errors, (
        f"expected pytest's usage error (exit 4) naming the regressions; came exit {run.returncode}:\n{run.tail()}")
