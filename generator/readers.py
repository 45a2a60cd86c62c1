"""Located readers for YAML documents: a mapping read against its declared keys (``Section``; an unknown key is
an error naming its line and the closest declared key) and one reader per value type, each naming the key's
position and what was expected. Generic: the matrix (``model``), ci-infra's steps (``steps``) and the e2e
suite configuration use them."""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable

from spec_decode_ci.generator.load import Document, join

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORBIDDEN_CHAR = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")
Parse = Callable[[Document, str, Any], Any]


def closest(word: str, candidates) -> str | None:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return match[0] if match else None


# Keys of older test-area files (and of other CI systems) and what ci-infra reads instead.
class Section:
    """Reads one mapping of a document against a declared set of keys."""

    def __init__(self, doc: Document, path: str, what: str, keys: tuple[str, ...] = (),
                 renamed: dict[str, str] | None = None):
        self.doc, self.path, self.what = doc, path, what
        self.renamed = renamed or {}  # old spelling -> current key: named first when an unknown key is one
        data = _lookup(doc.data, path)
        if not isinstance(data, dict):
            raise doc.error(path, f"expected a mapping ({what}), got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.allowed: list[str] = list(keys)
        if keys:
            self.finish()

    def get(self, key: str, parse: Parse, default: Any = None, required: bool = False):
        if key not in self.allowed:
            self.allowed.append(key)
        if key not in self.data or (self.data[key] is None and not required):
            if required:
                self._unknown_keys(missing=key)
                raise self.doc.error(self.path, f"missing required key '{key}' in {self.what}")
            return default
        return parse(self.doc, join(self.path, key), self.data[key])

    def _unknown_keys(self, missing: str | None = None) -> None:
        """Raise at the first key that is not declared, naming the closest declared key."""
        for key in self.data:
            if key in self.allowed:
                continue
            candidates = [missing] if missing else self.allowed
            guess = self.renamed.get(key) if self.renamed.get(key) in candidates else closest(key, candidates)
            if missing and guess is None:
                continue
            hint = f"did you mean '{guess}'?" if guess else f"expected one of: {', '.join(self.allowed)}"
            raise self.doc.error(join(self.path, key), f"unknown key '{key}' in {self.what} ({hint})")

    def declare(self, *keys: str) -> None:
        """Keys this mapping may hold beyond those declared up front (names the document itself defines)."""
        self.allowed += [k for k in keys if k not in self.allowed]

    def finish(self) -> None:
        self._unknown_keys()


def _lookup(data: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}.get(
        type(value), f"a {type(value).__name__}"
    )


def text(doc: Document, path: str, value: Any, *, pattern: re.Pattern[str] | None = None, hint: str = "") -> str:
    if not isinstance(value, str) or not value.strip():
        raise doc.error(path, f"expected a non-empty string{hint and ' ' + hint}, got {_kind(value)}")
    bad = _FORBIDDEN_CHAR.search(value)
    if bad:
        import unicodedata  # error path only

        name = unicodedata.name(bad.group(), f"U+{ord(bad.group()):04X}")
        raise doc.error(path, f"expected printable text, found control character {name}")
    if pattern is not None and not pattern.match(value):
        raise doc.error(path, f"expected {hint or 'a value matching ' + pattern.pattern}, got {value!r}")
    return value


def patterned(pattern: re.Pattern[str], hint: str) -> Parse:
    return lambda doc, path, value: text(doc, path, value, pattern=pattern, hint=hint)


def integer(minimum: int, maximum: int | None = None) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
            maximum is not None and value > maximum
        ):
            bound = f"≥ {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise doc.error(path, f"expected an integer {bound}, got {value!r} ({_kind(value)})")
        return value

    return parse


def number(minimum: float, maximum: float | None = None) -> Parse:
    """An integer or decimal number in [minimum, maximum] (a boolean is not a number)."""
    def parse(doc: Document, path: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum or (
            maximum is not None and value > maximum
        ):
            bound = f"≥ {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise doc.error(path, f"expected a number {bound}, got {value!r} ({_kind(value)})")
        return float(value)

    return parse


def boolean(doc: Document, path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {value!r} ({_kind(value)})")
    return value


def one_of(choices: tuple[str, ...]) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> str:
        if value not in choices:
            raise doc.error(path, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def text_list(item: Parse = text, *, non_empty: bool = False, unique: bool = True) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or (non_empty and not value):
            raise doc.error(path, f"expected a {'non-empty ' if non_empty else ''}list of strings, got {_kind(value)}")
        items = tuple(item(doc, join(path, i), v) for i, v in enumerate(value))
        for i, v in enumerate(items):
            if unique and v in items[:i]:
                raise doc.error(join(path, i), f"duplicate entry {v!r}")
        return items

    return parse


def env_mapping(doc: Document, path: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping of environment variables, got {_kind(value)}")
    out = []
    for name, setting in value.items():
        text(doc, join(path, name), name, pattern=ENV_NAME_RE, hint="an environment variable name")
        if isinstance(setting, bool) or not isinstance(setting, (str, int)):
            raise doc.error(join(path, name), f"expected a string or integer value, got {_kind(setting)}")
        # an empty value is a variable set to nothing (ci-infra's `Dict[str, str]`; the generator writes one for a
        # device without capabilities)
        setting = str(setting)
        out.append((name, text(doc, join(path, name), setting) if setting else ""))
    return tuple(out)


def string_mapping(doc: Document, path: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping of strings, got {_kind(value)}")
    return tuple((k, text(doc, join(path, k), v)) for k, v in value.items())


def plain_mapping(doc: Document, path: str, value: Any) -> dict[str, Any]:
    """A mapping passed through as written (Buildkite's `retry`, whose schema Buildkite checks)."""
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping, got {_kind(value)}")
    return value


def requirement(doc: Document, path: str, value: Any) -> str:
    """A pip requirement (PEP 508): ``name[extras]==version``, ``name @ git+https://...@<commit>``, a wheel URL."""
    from packaging.requirements import InvalidRequirement, Requirement

    value = text(doc, path, value)
    try:
        Requirement(value)
    except InvalidRequirement as exc:
        raise doc.error(path, f"expected a pip requirement (PEP 508: name[extras]==version, or name @ URL), "
                              f"got {value!r}: {str(exc).splitlines()[0]}") from None
    return value


def section(what: str) -> Parse:
    return lambda doc, path, value: Section(doc, path, what)
