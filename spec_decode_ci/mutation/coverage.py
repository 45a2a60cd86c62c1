"""Which mutated functions each test of a run calls (``--mutated-calls PATH``): a mutant in a function no test
calls cannot change any test's outcome, and one in a function only some tests call is run against those.

Recorded with ``sys.settrace``'s call events, for the registered backends' ``mutated`` functions only (their code,
in vLLM's module or in the tier's copy of it, names vLLM's file; a function nested in one counts as it):
``{"test file::test name": ["file:Class.method", ...]}``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from spec_decode_ci.backends import BACKENDS


def mutated_code() -> dict[str, tuple[str, ...]]:
    """Each backend module's file and the qualified names of its mutated functions."""
    found: dict[str, tuple[str, ...]] = {}
    for backend in BACKENDS.values():
        if backend.mutated:
            found[importlib.import_module(backend.module).__file__] = backend.mutated
    return found


def function_id(file: str, qualname: str) -> str:
    return f"{file}:{qualname}"


class MutatedCallsRecorder:
    """The plugin ``--mutated-calls PATH`` registers: the mutated functions each test called, written to PATH as
    the session ends."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.functions = mutated_code()
        self.calls: dict[str, set[str]] = {}
        self._current: set[str] | None = None

    def _called(self, frame, event, arg):
        code = frame.f_code
        if event == "call" and self._current is not None:
            for name in self.functions.get(code.co_filename, ()):
                if code.co_qualname == name or code.co_qualname.startswith(name + ".<locals>."):
                    self._current.add(function_id(code.co_filename, name))
        return None  # no line events: which functions ran is all that is recorded

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._current = self.calls.setdefault(f"{item.path}::{item.name}", set())
        previous = sys.gettrace()
        sys.settrace(self._called)
        try:
            yield
        finally:
            sys.settrace(previous)
            self._current = None

    def pytest_sessionfinish(self, session):
        self.path.write_text(json.dumps({test: sorted(called) for test, called in self.calls.items()},
                                        sort_keys=True))


def tests_calling(calls: dict[str, list[str]], file: str, function: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The test files and the tests (``function[parameters]``) that called ``function`` of ``file``."""
    calling = sorted(test for test, called in calls.items() if function_id(file, function) in called)
    return (tuple(sorted({t.rsplit("::", 1)[0] for t in calling})),
            tuple(sorted({t.rsplit("::", 1)[1] for t in calling})))
