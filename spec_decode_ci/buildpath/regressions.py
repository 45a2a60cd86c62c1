"""Regressions of the bug classes the build-path tier exists for, re-applied to a private copy of vLLM's module:
PR #39546's two, the later FlashInfer ones, and the MLA builders' (applied to vLLM's common MLA module, with a
copy of the backend's module built on top of it so its builder inherits the regression). Which module a backend's
copy is made of, and how, is its record in ``spec_decode_ci.backends``.

The copy is compiled from vLLM's own source with one textual change (a ``Patch`` of ``spec_decode_ci.patches``,
``selfcheck == "cpu"``) and used only by the harness that asks for it (``pytest --regression <name>``);
vLLM's real module is never modified. If vLLM's code no longer contains the text a regression edits, that is
the harness's breakage (``PatchDoesNotApply``): the self-check would otherwise silently test nothing. The same
copy takes an operator mutant instead (``mutant:<backend>:<number>``, ``spec_decode_ci.mutation``).
"""

from __future__ import annotations

import inspect
import types
from functools import lru_cache
from typing import Any

from spec_decode_ci.backends import Backend, backend_of_module
from spec_decode_ci.mutation.mutants import BuildPathMutant, is_mutant_name, mutant_named
from spec_decode_ci.patches import REGRESSIONS, Patch
from spec_decode_ci.pytest_run import REGRESSION_OPTION

_asked: str | None = None  # what this process's pytest run asked for (``ask``)


def _compiled_copy(original: types.ModuleType, source: str) -> types.ModuleType:
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(__file__=original.__file__, __package__=original.__package__)
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


def _with_recompiled(original: types.ModuleType, definitions: dict[Any, Any], **replaced: Any) -> types.ModuleType:
    """A module with ``original``'s namespace (``replaced`` names swapped) in which each top-level class or
    function of ``definitions`` is compiled again from its source through its transform (None: unchanged): for
    modules whose import has side effects (custom ops). The classes compiled again call the functions compiled
    again (both look names up in the copy's namespace). A transform gets the definition's lines at their line
    numbers in the file (empty lines before)."""
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(vars(original))
    module.__dict__.update(replaced)
    for definition, transform in definitions.items():
        lines, first = inspect.getsourcelines(inspect.unwrap(definition))
        source = (transform or (lambda text: text))("\n" * (first - 1) + "".join(lines))  # vLLM's line numbers
        exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


def _backend(module: str) -> Backend:
    backend = backend_of_module(module)
    if backend is None:
        raise ValueError(f"no registered backend (spec_decode_ci.backends) has its builder in {module}")
    return backend


def _recompiled(backend: Backend, original: types.ModuleType) -> dict[Any, Any]:
    return {getattr(original, name): None for name in backend.recompiled}


def change_named(name: str) -> Patch | BuildPathMutant:
    """The regression (a name of ``REGRESSIONS``) or operator mutant (``mutant:<backend>:<number>``) ``name``."""
    if is_mutant_name(name):
        return mutant_named(name)
    if name not in REGRESSIONS:
        raise ValueError(f"{name!r} is no regression or mutant; expected one of {sorted(REGRESSIONS)} or "
                         f"mutant:<backend>:<number>")
    return REGRESSIONS[name]


@lru_cache(maxsize=None)
def patched_backend(name: str) -> types.ModuleType:
    """A copy of the module regression or mutant ``name`` targets, with the change made (for a module whose
    import has side effects, its backend's ``recompiled`` definitions and the one the change edits are compiled
    again)."""
    import importlib

    change = change_named(name)
    original = importlib.import_module(change.module)
    backend = _backend(change.module)
    if backend.recompiled:
        definition = change.definition or backend.recompiled[0]
        edited = getattr(original, definition)
        where = f"{original.__file__} ({definition})"
        return _with_recompiled(original, {**_recompiled(backend, original),
                                           edited: lambda source: change.edit(source, where)})
    return _compiled_copy(original, change.edit(inspect.getsource(original), original.__file__))


def ask(name: str | None) -> None:
    """This process's harnesses are built on the copy ``name`` asks for (a regression, a mutant, or ``none``: vLLM's
    module copied unchanged); None: on vLLM's own modules. ValueError naming the option for an unknown name."""
    global _asked
    if name and name != "none":
        try:
            change_named(name)
        except ValueError as exc:
            raise ValueError(f"{REGRESSION_OPTION} {name}: {exc}") from None
    _asked = name or None


@lru_cache(maxsize=None)
def _copies(name: str, backend: Backend, builder: type) -> tuple[types.ModuleType, types.ModuleType]:
    import importlib

    original = importlib.import_module(backend.module)
    if change_named(name).module == backend.module:
        base = patched_backend(name)
    elif backend.recompiled:
        base = _with_recompiled(original, _recompiled(backend, original))
    else:
        base = _compiled_copy(original, inspect.getsource(original))
    if builder.__module__ == backend.module:
        return base, base
    derived = importlib.import_module(builder.__module__)
    inherited = {n: getattr(base, n) for n in backend.recompiled}
    return _with_recompiled(derived, {builder: None}, **inherited), base


def requested(backend: Backend, builder: type) -> tuple[types.ModuleType, types.ModuleType] | None:
    """The self-check's copies for a harness of ``backend`` whose builder class is ``builder``: (a copy of
    ``builder``'s module, the copy of ``backend.module`` it is built on; one module for a builder defined there),
    the latter regressed as ``--regression`` names (unchanged for the control ``none``). None for vLLM's
    own modules: no regression asked for, or one that edits another backend's module. Each copy defines the
    builder class under its own name."""
    name = _asked
    if name is None or change_named(name).module != backend.module and name != "none":
        return None
    return _copies(name, backend, builder)
