"""Opt-in pytest plugin of the harness: ``-p spec_decode_ci.pytest_plugin`` or ``pytest_plugins = [...]``.

It registers the suites' markers, skips tests that need vLLM where it is not installed, parametrizes each
e2e suite class with its cases and provides the shared fixtures.
Installing the package changes no other project's test run: nothing here loads unless asked for.
"""

from __future__ import annotations

import collections
import importlib.util

import pytest

from spec_decode_ci.generator.names import RESULTS_OPTION
from spec_decode_ci.pytest_run import REGRESSION_OPTION

MARKERS = {
    "build_path": "drives vLLM's real FlashInfer metadata builders (CPU with emulated Blackwell, or GPU)",
    "selfcheck": "re-applies known regressions to vLLM's module and expects the build-path tier to go red",
    "sentinel": "the host-sync sentinel's verdicts (CPU half) and their agreement with CUDA's sync debug mode",
    "e2e": "end-to-end spec decode through vLLM's LLM on a GPU (needs weights or the tiny-model config)",
    "e2e_offline": "builds every e2e engine configuration from tiny local configs, on CPU",
    "packaging": "the installed wheel runs its suites beside a decoy vLLM tests tree (needs vLLM there)",
    "harness": "the harness's checks of itself on the installed vLLM: its breakage reports, its GPU self-check's "
               "breaks, its tiny models, its generated steps' collection",
    "vllm_area": "vLLM's own spec-decode test-area file (in the checkout the step runs in) says what the matrix says",
    "mutation": "operator mutants of vLLM's builders (--mutants N or all) must each turn the build-path tier red "
                "or be listed as equivalent",
}
VLLM_MARKERS = {"build_path", "selfcheck", "e2e", "e2e_offline", "packaging", "harness", "mutation"}
# Tests of these markers drive vLLM's FlashInfer backend module (imported before they are collected).
FLASHINFER_MARKERS = {"build_path", "selfcheck", "harness", "mutation"}
FLASHINFER_BACKEND = "vllm.v1.attention.backends.flashinfer"
BREAKAGE = "harness_breakage"  # user property of a test that ended in compat.MissingVllmField


def pytest_addoption(parser):
    parser.addoption(RESULTS_OPTION, metavar="PATH", default=None,
                     help="write the run's results file here (JSON: what ran, where, each case's figures and checks; "
                          "spec_decode_ci.results)")
    parser.addoption("--mutants", metavar="N|all", default="0",
                     help="the mutation suite: run N operator mutants per backend drawn with --mutation-seed, or all "
                          "(default 0: none, the suite skips)")
    parser.addoption("--mutation-seed", type=int, default=0, help="the seed --mutants N draws with")
    parser.addoption("--mutation-workers", type=int, default=1,
                     help="tier runs at a time in the mutation suite (each imports vLLM once)")
    parser.addoption(REGRESSION_OPTION, metavar="NAME", default=None,
                     help="build the tier's harnesses on a copy of vLLM's module with this regression of "
                          "spec_decode_ci.patches or operator mutant (mutant:<backend>:<n>); none: copied unchanged")
    parser.addoption("--mutated-calls", metavar="PATH", default=None,
                     help="write which of the mutated builder functions each test calls (JSON; "
                          "spec_decode_ci.mutation.coverage)")


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    path = config.getoption(RESULTS_OPTION, None)
    if path and not hasattr(config, "workerinput"):  # under xdist the controller sees every worker's reports
        config.pluginmanager.register(ResultsRecorder(path), "spec_decode_ci_results")
    regression = config.getoption(REGRESSION_OPTION, None)
    if regression:
        from spec_decode_ci.buildpath.regressions import ask

        try:
            ask(regression)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    calls = config.getoption("--mutated-calls", None)
    if calls:
        from spec_decode_ci.mutation.coverage import MutatedCallsRecorder

        config.pluginmanager.register(MutatedCallsRecorder(calls), "spec_decode_ci_mutated_calls")


class ResultsRecorder:
    """Keeps how each test ended and what it recorded, and writes the results file when the session ends."""

    def __init__(self, path: str):
        from spec_decode_ci import results

        self.path, self.started_at, self.records = path, results.now(), {}

    def pytest_runtest_logreport(self, report):
        from spec_decode_ci import results

        properties = dict(getattr(report, "user_properties", ()))
        record = self.records.get(report.nodeid)
        if record is None:
            record = self.records[report.nodeid] = results.TestRecord(
                report.nodeid, results.case_of(report.nodeid, properties), "passed", None, 0.0, {})
        record.properties.update((k, v) for k, v in properties.items() if k != BREAKAGE)
        record.case = results.case_of(report.nodeid, record.properties)  # a test may name its case as it runs
        record.duration_s += report.duration
        outcome = _outcome(report)
        red = ("failed", "error")
        if outcome in red and record.outcome not in red or outcome == "skipped" and record.outcome == "passed":
            record.outcome, record.message = outcome, _message(report)  # a test's first red phase tells

    def pytest_sessionfinish(self, session, exitstatus):
        from pathlib import Path

        from spec_decode_ci import results

        records = list(self.records.values())
        results.write(Path(self.path), results.build_results(records, self.started_at, int(exitstatus)))


def _outcome(report) -> str | None:
    """What one phase's report says of its test (None: nothing against it)."""
    if report.failed:
        return "error" if report.when != "call" or _breakage(report) else "failed"
    if report.skipped:
        return "skipped"
    return None


def _message(report) -> str | None:
    """A phase's one message: the skip reason, or the exception's own text."""
    from spec_decode_ci.results import MESSAGE_CHARS

    longrepr = report.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        text = str(longrepr[2]).removeprefix("Skipped: ")
    else:
        crash = getattr(longrepr, "reprcrash", None)
        lines = (crash.message if crash is not None else str(longrepr).strip().splitlines()[-1]).splitlines()
        text = lines[0] if lines else ""
    breakage = _breakage(report)
    text = f"{breakage}: {text}" if breakage else text
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def fail_fast_order(items: list) -> None:
    """The tests closest to PR #39546's bugs (those its regressions must turn red) first, the rest in collection
    order: a change that brings the bug back is red in the first seconds of a run (xdist hands tests out in this
    order too)."""
    from spec_decode_ci.patches import closest_to_pr_39546

    first = closest_to_pr_39546()
    items.sort(key=lambda item: item.name not in first)


def pytest_collection_modifyitems(config, items):
    from spec_decode_ci.pytest_run import keep_only_named

    keep_only_named(config, items)  # a harness's child run asked for some tests alone
    fail_fast_order(items)
    has_vllm = importlib.util.find_spec("vllm") is not None
    for item in items:
        if not has_vllm and VLLM_MARKERS & {m.name for m in item.iter_markers()}:
            item.add_marker(pytest.mark.skip(reason="vLLM is not installed (pip install 'spec-decode-ci[build-path]')"))
    if (has_vllm and not hasattr(config, "workerinput")  # an xdist worker: its controller checked already
            and any(FLASHINFER_MARKERS & {m.name for m in item.iter_markers()} for item in items)):
        _exit_without_flashinfer()


def pytest_sessionstart(session):
    """Before collection (and before pytest-xdist starts its workers), where the marker expression can select
    tests that need vLLM: the warm-up of vLLM's model-class facts (``spec_decode_ci.model_info``), ended with the
    session. Under xdist the controller collects nothing, so it checks for FlashInfer here."""
    config = session.config
    if hasattr(config, "workerinput") or importlib.util.find_spec("vllm") is None:
        return
    markexpr = config.getoption("markexpr", "") or None
    if getattr(config.option, "numprocesses", None) and any(selects(markexpr, m) for m in FLASHINFER_MARKERS):
        _exit_without_flashinfer()
    if any(selects(markexpr, m) for m in VLLM_MARKERS):
        from spec_decode_ci import model_info

        warm_up = model_info.start()
        if warm_up is not None:
            config.add_cleanup(warm_up.stop)


def selects(expression: str | None, marker: str) -> bool:
    """Whether pytest's ``-m expression`` selects a test carrying ``marker`` alone (no expression: every test)."""
    from _pytest.mark.expression import Expression

    return expression is None or Expression.compile(expression).evaluate(lambda name: name == marker)


def _exit_without_flashinfer() -> None:
    problem = flashinfer_backend_problem()
    if problem:
        pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)


def flashinfer_backend_problem() -> str | None:
    """One line saying why vLLM's FlashInfer backend cannot be imported here, or None where it can."""
    try:
        importlib.import_module(FLASHINFER_BACKEND)
    except ImportError as exc:
        return (f"vLLM's FlashInfer backend ({FLASHINFER_BACKEND}) cannot be imported here: {exc}. The build-path "
                f"suites need vLLM's CUDA image (FlashInfer with its kernels, as ci-infra gives GPU devices such as "
                f"h200_18gb), or a CUDA torch install with flashinfer-python; vLLM's CPU image has no FlashInfer")
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that ends in ``compat.MissingVllmField`` found the harness unable to drive this vLLM: marked so that
    it is reported as an error, not a failure (``pytest_report_teststatus``), and summed up once at the end.
    Every failure's raising site goes to ``run_pytest``'s failure log where one is asked for."""
    if call.when == "setup":
        _name_the_case(item)
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        from spec_decode_ci.compat import MissingVllmField
        from spec_decode_ci.pytest_run import record_failure

        record_failure(item, call.excinfo)

        exc = call.excinfo.value
        while exc is not None and not isinstance(exc, MissingVllmField):
            exc = exc.__cause__ or exc.__context__
        if exc is not None:
            report.user_properties.append((BREAKAGE, exc.summary))


def _name_the_case(item) -> None:
    """An e2e test (parametrized with a ``case``) records the case it checks, for the results file."""
    from spec_decode_ci.results import CASE_PROPERTY

    case = getattr(getattr(item, "callspec", None), "params", {}).get("case")
    if getattr(case, "id", None) and CASE_PROPERTY not in dict(item.user_properties):
        item.user_properties.append((CASE_PROPERTY, case.id))


def _breakage(report) -> str | None:
    return dict(getattr(report, "user_properties", ())).get(BREAKAGE)


def pytest_report_teststatus(report, config):
    if report.when == "call" and report.failed and _breakage(report):
        return "error", "E", "ERROR"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    missing: dict[str, int] = {}
    for report in terminalreporter.stats.get("error", []):
        what = _breakage(report)
        if what:
            missing[what] = missing.get(what, 0) + 1
    if missing:
        found = "; ".join(f"{what}: {n} test{'s' if n > 1 else ''}" for what, n in missing.items())
        terminalreporter.write_line(f"the harness cannot drive this vLLM: {found}. Update the harness "
                                    f"(spec_decode_ci.compat, or the patches its self-checks apply); these are not "
                                    f"findings about vLLM", red=True, bold=True)


def pytest_generate_tests(metafunc):
    """Each e2e suite class (a ``suite`` attribute) runs once per case of that suite."""
    suite = getattr(metafunc.cls, "suite", None)
    if suite and "case" in metafunc.fixturenames:
        suite_cases = e2e_config(metafunc.config).cases(suite)
        metafunc.parametrize("case", suite_cases, ids=[c.id for c in suite_cases])


_E2E_CONFIG = pytest.StashKey()


def e2e_config(pytest_config):
    """The e2e suite configuration, resolved once per session (tiny models written where they can run)."""
    if _E2E_CONFIG not in pytest_config.stash:
        import shutil
        import tempfile
        from pathlib import Path

        from spec_decode_ci.e2e import cases
        from spec_decode_ci.e2e.case_runs import resolve

        root = Path(tempfile.mkdtemp(prefix="spec-decode-ci-tiny-models-"))
        pytest_config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
        pytest_config.stash[_E2E_CONFIG] = resolve(cases.load(), root)
    return pytest_config.stash[_E2E_CONFIG]


@pytest.fixture(scope="session")
def runs(request):
    """The engine runs of the e2e suites of this pytest run: a speculative engine per case, a baseline per
    target (``CaseRuns``)."""
    from spec_decode_ci.e2e.case_runs import CaseRuns

    return CaseRuns(e2e_config(request.config))


@pytest.fixture(scope="session")
def vllm_forked_pytest():
    """Child pytest runs (``ForkedPytest``) forked from one process that imported vLLM's top-level package once:
    for tests that run the harness's suites against a changed vLLM, whose changed modules ``import vllm`` does not
    import (each run imports them itself, changed)."""
    from spec_decode_ci.pytest_run import ForkedPytest

    runs = ForkedPytest(preload=("vllm",))
    yield runs
    runs.close()


# How many harnesses are kept for reuse, the least recently used dropped first: a builder that plans FlashInfer's native
# paths holds its workspace (394 MiB or more), and the tier makes a few dozen distinct builders.
HARNESSES_KEPT = 6


@pytest.fixture(scope="session")
def build_harness():
    """A harness of any registered backend (``spec_decode_ci.backends``), one per (options, emulated GPU), the
    last ``HARNESSES_KEPT`` used kept: building vLLM's config and a real builder costs a second each. Without
    options: FlashInfer's defaults."""
    from spec_decode_ci.backends import backend_for
    from spec_decode_ci.emulation import BLACKWELL, UnsupportedEmulation
    from spec_decode_ci.flashinfer.builder import BuilderOptions

    cache: collections.OrderedDict = collections.OrderedDict()

    def get(options=None, gpu=None):
        options, gpu = options if options is not None else BuilderOptions(), gpu or BLACKWELL
        key = (type(options), options, gpu)
        if key not in cache:
            try:
                cache[key] = backend_for(options).make_harness(options, gpu)
            except UnsupportedEmulation as exc:
                pytest.skip(str(exc))
            while len(cache) > HARNESSES_KEPT:
                cache.popitem(last=False)
        cache.move_to_end(key)
        return cache[key]

    return get
