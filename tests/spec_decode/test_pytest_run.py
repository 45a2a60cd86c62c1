"""How the harness runs pytest: ForkedPytest's runs forked from one server are as independent as child processes
(each its own environment and module state) and give run_pytest's verdicts; the plugin's fail-fast order."""

from __future__ import annotations

import os
import textwrap

import pytest

from spec_decode_ci.pytest_run import ForkedPytest, run_pytest

TESTS = textwrap.dedent("""
    import os
    import json  # preloaded by the server: its state is what the server imported, never an earlier run's

    def test_sees_its_own_environment():
        assert os.environ["FORKED_VALUE"] == "1", os.environ["FORKED_VALUE"]

    def test_no_state_from_an_earlier_run():
        assert not hasattr(json, "left_by_a_run")
        json.left_by_a_run = True

    def test_fails():
        assert False, "red on purpose"
""")


@pytest.fixture(scope="module")
def forked():
    runs = ForkedPytest(preload=("json",))
    yield runs
    runs.close()


def test_forked_runs_are_independent_and_agree_with_a_child_process(forked, tmp_path):
    path = tmp_path / "test_forked.py"
    path.write_text(TESTS)
    child = run_pytest(str(path), env={"FORKED_VALUE": "2"})
    first = forked.run(str(path), env={"FORKED_VALUE": "2"})
    second = forked.run(str(path), env={"FORKED_VALUE": "1"})
    assert child.red == first.red == {"test_sees_its_own_environment", "test_fails"}, first.tail()
    assert second.red == {"test_fails"}, second.tail()  # no json.left_by_a_run from the first run
    assert first.returncode == second.returncode == child.returncode == 1
    assert {f.test for f in second.failures if f.by_a_check} == {"test_fails"}
    assert first.max_rss_mib > 0 and child.max_rss_mib is None  # a forked run's peak memory is measured


def test_only_runs_the_tests_named(forked, tmp_path):
    path = tmp_path / "test_forked.py"
    path.write_text(TESTS)
    run = forked.run(str(path), env={"FORKED_VALUE": "1"}, only=("test_sees_its_own_environment",))
    assert run.returncode == 0 and "1 passed, 2 deselected" in run.output, run.tail()
    none = forked.run(str(path), env={"FORKED_VALUE": "1"}, only=("test_renamed_since",))
    assert none.returncode == 5, none.tail()  # pytest's "no tests ran": a must_fail name that matches nothing


def run_with_preloaded(tmp_path, monkeypatch, modules: dict[str, str], only: tuple[str, ...], tests: str = TESTS):
    """One run of ``tests`` (``only`` those) from a server that preloaded ``modules`` (name: source), and the
    preloads the server left to its runs."""
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    path = tmp_path / "test_forked.py"
    path.write_text(tests)
    runs = ForkedPytest(preload=tuple(modules))
    try:
        return runs.run(str(path), env={"FORKED_VALUE": "1"}, only=only), runs.left_to_runs
    finally:
        runs.close()


# A module whose import initialises CUDA, as FlashInfer's does on a GPU machine (torch's own check, stood in for).
INITIALISES_CUDA = "import os, torch\nIMPORTED_IN = os.getpid()\ntorch.cuda.is_initialized = lambda: True\n"
IMPORTED_IN = "import os\nIMPORTED_IN = os.getpid()\n"


def test_a_preload_that_initialises_cuda_is_left_to_each_run(tmp_path, monkeypatch):
    """The server imports every preload but the one that initialises CUDA, which each forked run imports itself."""
    tests = textwrap.dedent("""
        import os
        import initialises_cuda, preloaded_after

        def test_where_each_preload_was_imported():
            assert initialises_cuda.IMPORTED_IN == os.getpid()
            assert preloaded_after.IMPORTED_IN != os.getpid()
    """)
    run, left = run_with_preloaded(tmp_path, monkeypatch, {"initialises_cuda": INITIALISES_CUDA,
                                                           "preloaded_after": IMPORTED_IN}, (), tests)
    assert left == ("initialises_cuda",)
    assert run.returncode == 0 and "1 passed" in run.output, run.tail()
    assert run.max_rss_mib > 0  # forked, not a child process of its own


def test_a_server_with_cuda_initialised_runs_each_in_a_child_process(tmp_path, monkeypatch):
    """A forked child cannot use a GPU its parent initialised: a server where CUDA is initialised after its
    preloads answers every run with a child process of its own, with the same verdicts and selection."""
    later = "import torch\nchecks = iter([False])\ntorch.cuda.is_initialized = lambda: next(checks, True)\n"
    run, left = run_with_preloaded(tmp_path, monkeypatch, {"initialised_later": later},
                                   ("test_sees_its_own_environment", "test_fails"))
    assert left == ()
    assert run.red == {"test_fails"} and "1 failed, 1 passed, 1 deselected" in run.output, run.tail()
    assert run.max_rss_mib is None  # a child process's run, not a forked one


def test_the_tests_closest_to_pr_39546_run_first():
    """The tests PR #39546's regressions must turn red move to the front, the others keep their order."""
    from types import SimpleNamespace

    from spec_decode_ci.patches import REGRESSIONS, closest_to_pr_39546
    from spec_decode_ci.pytest_plugin import fail_fast_order

    first = closest_to_pr_39546()
    assert set(REGRESSIONS["old_guard"].must_fail) | set(REGRESSIONS["stale_indptr"].must_fail) == first
    names = ["test_a", *sorted(first)[:1], "test_b", *sorted(first)[1:], "test_c"]
    items = [SimpleNamespace(name=n) for n in names]
    fail_fast_order(items)
    assert [i.name for i in items] == [*sorted(first)[:1], *sorted(first)[1:], "test_a", "test_b", "test_c"]


def test_what_the_preloaded_modules_print_does_not_reach_the_replies(tmp_path, monkeypatch):
    """A preloaded module that prints or logs to stdout (vLLM's logger does, at import and later) leaves the
    server's replies readable."""
    run, _ = run_with_preloaded(tmp_path, monkeypatch, {"preloaded": textwrap.dedent("""
        import logging, sys
        print("printed at import")
        logging.basicConfig(stream=sys.stdout)
        logging.getLogger("noisy").warning("logged at import")
        import os
        os.write(1, b"written to fd 1\\n")
    """)}, ("test_sees_its_own_environment",))
    assert run.returncode == 0 and "1 passed, 2 deselected" in run.output, run.tail()
