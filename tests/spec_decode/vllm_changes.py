"""Pytest plugin that makes the installed vLLM look changed, through an import hook (site-packages is never
written): ``$SPEC_DECODE_CI_HIDE_MODULES`` (comma-separated) no longer import, and ``$SPEC_DECODE_CI_RENAME``
(``module:old:new``) renames a name throughout that module's source when it is imported, as a vLLM refactor
would. Used by ``test_harness_breakage`` to show what the suites do with a vLLM the harness does not know."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys

HIDE_ENV, RENAME_ENV = "SPEC_DECODE_CI_HIDE_MODULES", "SPEC_DECODE_CI_RENAME"


class _RenamingLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, old: str, new: str):
        super().__init__(fullname, path)
        self.old, self.new = old, new

    def get_code(self, fullname):
        source = self.get_source(fullname)
        renamed, count = re.subn(rf"\b{re.escape(self.old)}\b", self.new, source)
        if not count:
            raise RuntimeError(f"{self.old!r} does not occur in {self.path}: nothing to rename")
        return compile(renamed, self.path, "exec")


class ChangedVllm(importlib.abc.MetaPathFinder):
    def __init__(self, hidden: set[str], rename: tuple[str, str, str] | None):
        self.hidden, self.rename = hidden, rename

    def find_spec(self, name, path=None, target=None):
        if name in self.hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by {HIDE_ENV})", name=name)
        if self.rename and name == self.rename[0]:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or not spec.origin:
                raise RuntimeError(f"{RENAME_ENV}: no source for {name}")
            spec.loader = _RenamingLoader(name, spec.origin, *self.rename[1:])
            return spec
        return None


def install() -> None:
    hidden = {m for m in os.environ.get(HIDE_ENV, "").split(",") if m}
    rename = tuple(os.environ[RENAME_ENV].split(":")) if os.environ.get(RENAME_ENV) else None
    if rename is not None and len(rename) != 3:
        raise ValueError(f"{RENAME_ENV}={os.environ[RENAME_ENV]!r}; expected module:old:new")
    if hidden or rename:
        for name in hidden | ({rename[0]} if rename else set()):
            sys.modules.pop(name, None)
        sys.meta_path.insert(0, ChangedVllm(hidden, rename))


install()
