"""Regressions of the bug classes the build-path tier exists for, re-applied to a private copy of vLLM's module:
PR #39546's two, the later FlashInfer ones, and the MLA builders' (applied to vLLM's common MLA module, with a
copy of the backend's module built on top of it so its builder inherits the regression).

The copy is compiled from vLLM's own source with one textual change (a ``Patch`` of ``spec_decode_ci.patches``,
``selfcheck == "cpu"``) and used only by the harness that asks for it (``SPEC_DECODE_CI_REGRESSION=<name>``);
vLLM's real module is never modified. If vLLM's code no longer contains the text a regression edits, that is
the harness's breakage (``PatchDoesNotApply``): the self-check would otherwise silently test nothing.
"""

from __future__ import annotations

import inspect
import os
import types
from functools import lru_cache
from typing import Any

from spec_decode_ci.patches import FLASHINFER, MLA_COMMON, REGRESSIONS, apply

ENV = "SPEC_DECODE_CI_REGRESSION"
def _compiled_copy(original: types.ModuleType, source: str) -> types.ModuleType:
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(__file__=original.__file__, __package__=original.__package__)
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


def _with_recompiled(original: types.ModuleType, definitions: dict[Any, Any], **replaced: Any) -> types.ModuleType:
    """A module with ``original``'s namespace (``replaced`` names swapped) in which each top-level class or
    function of ``definitions`` is compiled again from its source through its transform (None: unchanged): for
    modules whose import has side effects (custom ops). The classes compiled again call the functions compiled
    again (both look names up in the copy's namespace)."""
    module = types.ModuleType(original.__name__, original.__doc__)
    module.__dict__.update(vars(original))
    module.__dict__.update(replaced)
    for definition, transform in definitions.items():
        lines, first = inspect.getsourcelines(inspect.unwrap(definition))
        source = "\n" * (first - 1) + (transform or (lambda text: text))("".join(lines))  # vLLM's line numbers
        exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


@lru_cache(maxsize=None)
def patched_backend(name: str) -> types.ModuleType:
    """A copy of the module regression ``name`` targets, with the regression applied (for vLLM's common MLA
    module, whose import registers custom ops, the definition the regression edits and the builder class alone
    are compiled again)."""
    import importlib

    regression = REGRESSIONS[name]
    original = importlib.import_module(regression.module)
    if regression.module == MLA_COMMON:
        edited = getattr(original, regression.definition)
        where = f"{original.__file__} ({regression.definition})"
        return _with_recompiled(original, {original.MLACommonMetadataBuilder: None,
                                           edited: lambda source: apply(regression, source, where)})
    return _compiled_copy(original, apply(regression, inspect.getsource(original), original.__file__))


def _requested_name() -> str | None:
    name = os.environ.get(ENV)
    if name and name not in REGRESSIONS:
        raise ValueError(f"{ENV}={name!r}; expected one of {sorted(REGRESSIONS)}")
    return name or None


def requested() -> types.ModuleType | None:
    """The patched FlashInfer backend module named by $SPEC_DECODE_CI_REGRESSION, or None for vLLM's own
    (also when the regression named edits another module)."""
    name = _requested_name()
    if name is None or REGRESSIONS[name].module != FLASHINFER:
        return None
    return patched_backend(name)


@lru_cache(maxsize=None)
def _mla_backend_copy(name: str, builder: type) -> tuple[types.ModuleType, types.ModuleType]:
    import importlib

    original_common = importlib.import_module(MLA_COMMON)
    common = patched_backend(name) if REGRESSIONS[name].module == MLA_COMMON else \
        _with_recompiled(original_common, {original_common.MLACommonMetadataBuilder: None})
    backend = importlib.import_module(builder.__module__)
    if builder is original_common.MLACommonMetadataBuilder:
        return common, common
    return _with_recompiled(backend, {builder: None}, MLACommonMetadataBuilder=common.MLACommonMetadataBuilder), common


def requested_mla_backend(builder: type) -> tuple[types.ModuleType, types.ModuleType] | None:
    """(a copy of the module of the MLA builder class ``builder``, the copy of vLLM's common MLA module it is
    built on), the common builder regressed as $SPEC_DECODE_CI_REGRESSION names (unchanged for the control);
    None for vLLM's own modules. Each copy defines the builder class under its own name."""
    name = _requested_name()
    if name is None or REGRESSIONS[name].module != MLA_COMMON and name != "none":
        return None
    return _mla_backend_copy(name, builder)
