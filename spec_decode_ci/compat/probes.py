"""The release probes every difference is built on: the releases the tier supports, ``@difference`` and its
registry, ``MissingVllmField``, and lookups that name what they looked for."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable


OLDEST = "0.20.0"  # the first release with PR #39546's fix
NEWEST = "0.34.0"  # the newest release the tier is run on


@dataclass(frozen=True)
class Difference:
    name: str
    since: str  # the first release with the newer form
    what: str


DIFFERENCES: dict[str, Difference] = {}


class MissingVllmField(RuntimeError):
    """The installed vLLM lacks a field, class or module the harness reads, in every form it knows: the harness
    cannot drive this vLLM (its breakage, not a finding about vLLM). ``module`` and ``field`` name what is
    missing; ``last_found`` is the newest release where the harness found it."""

    def __init__(self, module: str, field: str, what: str = "", last_found: str = NEWEST, detail: str = ""):
        self.module, self.field, self.what, self.last_found = module, field, what, last_found
        super().__init__(f"{detail or f'{module} has no {field}'}{f' ({what})' if what else ''}; the harness last "
                         f"found it in vLLM {last_found}: update spec_decode_ci.compat")

    @property
    def summary(self) -> str:
        return f"{self.module} has no {self.field} (last found in vLLM {self.last_found})"


def _missing_from(exc: BaseException) -> MissingVllmField:
    """A ``MissingVllmField`` for a lookup error raised where compat reads vLLM."""
    if isinstance(exc, ImportError):
        name = exc.name or str(exc)
        module, _, field = name.rpartition(".")
        return MissingVllmField(module or name, field or name, detail=f"module {name} is not importable ({exc})")
    if isinstance(exc, AttributeError) and getattr(exc, "name", None):
        owner = getattr(exc, "obj", None)
        owner_name = getattr(owner, "__name__", type(owner).__name__)
        return MissingVllmField(getattr(owner, "__module__", None) or owner_name, exc.name,
                                detail=f"{owner_name} has no {exc.name}")
    return MissingVllmField("vllm", str(exc), detail=f"{type(exc).__name__} {exc} while reading vLLM")


def _raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the code of this package's modules (an import they made counts), not deeper
    in vLLM."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    frames = [f for f in frames if not f.startswith("<frozen importlib")]
    return bool(frames) and os.path.dirname(frames[-1]) == os.path.dirname(__file__)


def probe(func: Callable) -> Callable:
    """Lookups of vLLM's names that fail inside ``func`` (in this package's code) raise ``MissingVllmField``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (AttributeError, KeyError, IndexError, TypeError, ImportError, StopIteration) as exc:
            if _raised_here(exc):
                raise _missing_from(exc) from exc
            raise
    return wrapper


def vllm_module(name: str) -> types.ModuleType:
    """vLLM's module ``name``; ``MissingVllmField`` where it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise _missing_from(exc) from exc
        raise


def module_origin(name: str) -> str | None:
    """The file module ``name`` would be loaded from (not imported), or None where there is none."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    return spec.origin if spec is not None else None


def difference(since: str, what: str) -> Callable[[Callable], Callable]:
    def register(func: Callable) -> Callable:
        DIFFERENCES[func.__name__] = Difference(func.__name__, since, what)
        func = probe(func)
        func.since = since
        return func
    return register


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def compat_lane_releases() -> tuple[str, ...]:
    """The releases the compatibility lane runs: the oldest and newest claimed, and every release in between
    where a difference appears (so each branch of this module runs on a release that takes it)."""
    releases = {OLDEST, NEWEST, *(d.since for d in DIFFERENCES.values())}
    return tuple(sorted(releases, key=_version_key))


def require(owner: Any, *names: str, what: str) -> Any:
    """The first of ``names`` that ``owner`` has; ``MissingVllmField`` naming all of them otherwise."""
    for name in names:
        if hasattr(owner, name):
            return getattr(owner, name)
    label = getattr(owner, "__name__", type(owner).__name__)
    raise MissingVllmField(label, " / ".join(names), what, detail=f"{label} has none of {', '.join(names)}")


def require_fields(cls: type, names: Iterable[str]) -> None:
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = [n for n in names if n not in fields]
    if missing:
        raise MissingVllmField(f"{cls.__module__}.{cls.__name__}", ", ".join(missing),
                               detail=f"{cls.__module__}.{cls.__name__} has no field {', '.join(missing)}")


def _has_field(cls: type, name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(cls)}
