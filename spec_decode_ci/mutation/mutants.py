"""This vLLM's operator mutants of each registered backend's ``mutated`` functions, each with the name the
tier's copy of the module is asked for by (``mutant:<backend>:<number>``, numbered in source order, so a name
means the same mutant for the same vLLM source)."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache

from spec_decode_ci.backends import BACKENDS, Backend
from spec_decode_ci.mutation.operators import Mutant, mutants_of

PREFIX = "mutant"


@dataclass(frozen=True)
class BuildPathMutant:
    """One mutant of a backend's builder module, as the tier's copy applies it (``module``, ``definition`` and
    ``edit``, like a ``Patch``)."""

    backend: str
    number: int
    mutant: Mutant
    module: str
    file: str

    @property
    def name(self) -> str:
        return f"{PREFIX}:{self.backend}:{self.number}"

    @property
    def definition(self) -> str:
        """The module's top-level definition the mutant edits (a class, or a function)."""
        return self.mutant.function.split(".")[0]

    @property
    def key(self) -> str:
        return self.mutant.key

    def edit(self, source: str, where: str) -> str:
        return self.mutant.applied_to(source)

    def describe(self) -> str:
        return f"{self.file}:{self.mutant.line} {self.mutant.function} [{self.mutant.operator}] {self.mutant.change}"


@lru_cache(maxsize=None)
def backend_mutants(name: str) -> tuple[BuildPathMutant, ...]:
    """Every mutant of backend ``name``'s ``mutated`` functions in the installed vLLM's module."""
    backend: Backend = BACKENDS[name]
    module = importlib.import_module(backend.module)
    return tuple(BuildPathMutant(name, number, mutant, backend.module, module.__file__)
                 for number, mutant in enumerate(mutants_of(inspect.getsource(module), backend.mutated), 1))


def missing_functions(name: str) -> tuple[str, ...]:
    """The ``mutated`` functions of backend ``name`` the installed vLLM's module does not define."""
    made = {m.mutant.function for m in backend_mutants(name)}
    module = importlib.import_module(BACKENDS[name].module)
    return tuple(f for f in BACKENDS[name].mutated if f not in made and not _defined(module, f))


def _defined(module, qualname: str) -> bool:
    target = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target is not None


def is_mutant_name(name: str) -> bool:
    return name.startswith(PREFIX + ":")


def mutant_named(name: str) -> BuildPathMutant:
    """The mutant ``mutant:<backend>:<number>`` of the installed vLLM; ValueError naming the valid range."""
    try:
        _, backend, number = name.split(":")
        if int(number) < 1:
            raise IndexError(number)
        return backend_mutants(backend)[int(number) - 1]
    except (ValueError, KeyError, IndexError):
        counts = ", ".join(f"{b}: 1..{len(backend_mutants(b))}" for b in BACKENDS if BACKENDS[b].mutated)
        raise ValueError(f"{name!r} names no mutant of this vLLM; expected mutant:<backend>:<number> ({counts})") \
            from None
