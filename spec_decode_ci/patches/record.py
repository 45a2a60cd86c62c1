"""A ``Patch``: one deliberate change to one vLLM module's source, the suites it must turn red, and how it is
applied (``apply``); ``regression`` and ``gpu_break`` make the records of each self-check."""

from __future__ import annotations

import inspect
import re
import types
from dataclasses import dataclass
from typing import Callable

from spec_decode_ci import compat
from spec_decode_ci.backends import BACKENDS

# The builder modules of the registered backends the regressions edit.
FLASHINFER, MLA_COMMON = BACKENDS["flashinfer"].module, BACKENDS["mla"].module


# The build-path tier the CPU self-check runs against each regressed copy: every suite module whose tests are
# marked build_path (the self-check's child selects them with -m build_path).
TIER = ("spec_decode_ci.suites",)


@dataclass(frozen=True)
class Patch:
    name: str
    description: str
    selfcheck: str  # "cpu": a copy for the build-path tier; "gpu": loaded in place for an e2e suite
    module: str  # the vLLM module whose source is edited
    pattern: str  # regular expression matched once in its source
    replacement: str
    suites: tuple[str, ...]  # the suite modules (spec_decode_ci.suites...) run with the patch
    must_fail: tuple[str, ...] = ()  # test ids (function[case]) that must be red (a subset of what is)
    # Whether this vLLM has the code the patch undoes (a structural probe of the module, never a version): a
    # release without it has the bug natively, and the tier's verdict on that release says so.
    present: Callable[[types.ModuleType], bool] = lambda module: True
    # Why the batches a model runner (the argument) hands build() never meet the edited code (None: they do).
    unobservable: Callable[[str], str | None] = lambda runner: None
    last_found: str = compat.NEWEST  # the newest release whose code the patch was seen to edit
    # The GPU model runner (compat.V1_RUNNER / V2_RUNNER) whose code the patch edits: it applies where that
    # runner is installed and shows only where the engine runs it (None: code both runners call).
    runner: str | None = None
    # For a module whose import has side effects (its backend's ``recompiled``, spec_decode_ci.backends): the
    # top-level definition whose source the patch edits and the copy compiles again (None: the first of those).
    definition: str | None = None
    # Other modules that hold the edited code in some release (code moved between modules): the first of
    # ``module`` and these whose installed source has the code is edited.
    other_homes: tuple[str, ...] = ()
    # Edit every place the pattern matches (at least one): one change made wherever the module repeats the code.
    everywhere: bool = False

    @property
    def homes(self) -> tuple[str, ...]:
        return (self.module, *self.other_homes)

    def edit(self, source: str, where: str) -> str:
        """``source`` with this patch applied (``apply``)."""
        return apply(self, source, where)

    def unobservable_here(self) -> str | None:
        """Why no model runner this vLLM ships hands build() batches that meet the edited code (None: one does;
        the tier shapes batches as each shipped runner does)."""
        reasons = [self.unobservable(runner) for runner in compat.shipped_runners()]
        return f"this vLLM ships {', '.join(compat.shipped_runners())}: {reasons[0]}" if reasons and all(reasons) \
            else None

    def runner_missing(self) -> str | None:
        """Why this vLLM cannot run the patched code: its model runner is not installed (None: it is)."""
        if self.runner is None or compat.module_origin(self.runner) is not None:
            return None
        return f"patch {self.name!r} edits code of model runner {self.runner}, which this vLLM does not have"


class PatchDoesNotApply(compat.MissingVllmField):
    """The code a patch edits is gone from this vLLM: the self-check's breakage, not a finding."""


def apply(patch: Patch, source: str, where: str) -> str:
    """``source`` with ``patch`` applied at the one place its pattern matches (every place, for an ``everywhere``
    patch); ``PatchDoesNotApply`` where the code it edits is gone or its pattern matches more than one place
    (which one it breaks would be chance)."""
    patched, count = re.subn(patch.pattern, patch.replacement, source)
    if count == 0 or count > 1 and not patch.everywhere:
        why = "the code it edits is gone" if count == 0 else \
            f"its pattern matches {count} places, so which one it edits is unclear; make the pattern name one"
        raise PatchDoesNotApply(patch.module, f"/{patch.pattern}/", f"patch {patch.name!r}", patch.last_found,
                                detail=f"patch {patch.name!r} does not apply to {where}: {why}; update "
                                       f"spec_decode_ci/patches/")
    return patched


def source_contains(text: str) -> Callable[[types.ModuleType], bool]:
    """``present`` for a patch that undoes ``text``: this vLLM's module source holds it."""
    return lambda module: text in inspect.getsource(module)


def regression(name: str, description: str, pattern: str, replacement: str, *, target: str = FLASHINFER,
               **fields) -> Patch:
    """A patch for the CPU self-check: the build-path tier must turn red against a copy of ``target``."""
    return Patch(name, description, "cpu", target, pattern, replacement, TIER, **fields)


def gpu_break(name: str, description: str, module: str, pattern: str, replacement: str, suite_module: str,
              must_fail: tuple[str, ...], **fields) -> Patch:
    """A patch for the GPU self-check: the e2e suite ``suite_module`` must turn red on the GPU smoke; a patch of
    one runner's code was last found in the last release that ships that runner."""
    fields.setdefault("last_found", compat.last_release_with(fields.get("runner")))
    return Patch(name, description, "gpu", module, pattern, replacement, (f"{E2E_SUITES}.{suite_module}",),
                 must_fail, **fields)


E2E_SUITES = "spec_decode_ci.suites.e2e"
