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


def run_with_preloaded(tmp_path, monkeypatch, source: str, only: tuple[str, ...]):
    """One run of TESTS (``only`` those) from a server that preloaded a module of ``source``."""
    (tmp_path / "preloaded.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    path = tmp_path / "test_forked.py"
    path.write_text(TESTS)
    runs = ForkedPytest(preload=("preloaded",))
    try:
        return runs.run(str(path), env={"FORKED_VALUE": "1"}, only=only)
    finally:
        runs.close()


def test_a_server_with_cuda_initialised_runs_each_in_a_child_process(tmp_path, monkeypatch):
    """A forked child cannot use a GPU its parent initialised: such a server answers every run with a child
    process of its own, with the same verdicts and selection."""
    run = run_with_preloaded(tmp_path, monkeypatch, "import torch\ntorch.cuda.is_initialized = lambda: True\n",
                             ("test_sees_its_own_environment", "test_fails"))
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
    run = run_with_preloaded(tmp_path, monkeypatch, textwrap.dedent("""
        import logging, sys
        print("printed at import")
        logging.basicConfig(stream=sys.stdout)
        logging.getLogger("noisy").warning("logged at import")
        import os
        os.write(1, b"written to fd 1\\n")
    """), ("test_sees_its_own_environment",))
    assert run.returncode == 0 and "1 passed, 2 deselected" in run.output, run.tail()
