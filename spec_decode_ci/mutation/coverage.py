"""Which lines of the mutated functions each test of a run executes (``--mutated-lines PATH``): a mutant in a
function no test calls cannot change any test's outcome, and one in a function only some tests call is run
against those.

Recorded with ``sys.settrace`` in the frames of the registered backends' ``mutated`` functions only (their code,
in vLLM's module or in the tier's copy of it, names vLLM's file): ``{"test file::test name": {file: [line, ...]}}``.
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


class MutatedLinesRecorder:
    """The plugin ``--mutated-lines PATH`` registers: each test's executed lines of the mutated functions, written
    to PATH as the session ends."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.functions = mutated_code()
        self.lines: dict[str, dict[str, set[int]]] = {}
        self._current: dict[str, set[int]] | None = None

    def _traced(self, code) -> bool:
        names = self.functions.get(code.co_filename)
        return names is not None and any(code.co_qualname == n or code.co_qualname.startswith(n + ".<locals>.")
                                         for n in names)

    def _global(self, frame, event, arg):
        if event == "call" and self._traced(frame.f_code):
            return self._local
        return None

    def _local(self, frame, event, arg):
        if event == "line" and self._current is not None:
            self._current.setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return self._local

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._current = self.lines.setdefault(f"{item.path}::{item.name}", {})
        previous = sys.gettrace()
        sys.settrace(self._global)
        try:
            yield
        finally:
            sys.settrace(previous)
            self._current = None

    def pytest_sessionfinish(self, session):
        self.path.write_text(json.dumps({test: {f: sorted(ls) for f, ls in files.items()}
                                         for test, files in self.lines.items()}, sort_keys=True))


def tests_reaching(lines: dict[str, dict[str, list[int]]], file: str, first: int, last: int
                   ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The test files and the tests (``function[parameters]``) that executed any of lines ``first``..``last`` of
    ``file``."""
    reaching = sorted(test for test, files in lines.items()
                      if any(first <= line <= last for line in files.get(file, ())))
    return (tuple(sorted({t.rsplit("::", 1)[0] for t in reaching})),
            tuple(sorted({t.rsplit("::", 1)[1] for t in reaching})))
