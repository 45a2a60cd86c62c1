"""Stage 1, load: bytes on disk -> plain Python data plus the source position of every node.

PyYAML alone is not enough for a CI input: it takes the last of two duplicate keys silently, expands
anchors (alias bombs) and reports positions only in its own exceptions. We compose the node graph and
walk it ourselves, so every later error can say ``file:line:col`` and aliases are refused outright.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spec_decode_ci.generator.errors import InputError

Location = tuple[int, int]  # 1-based line, column


@dataclass
class Document:
    """Parsed YAML: ``data`` is plain dicts/lists/scalars; ``marks`` maps a dotted path to its position."""

    file: str
    data: Any
    marks: dict[str, Location] = field(default_factory=dict)

    def error(self, path: str, message: str) -> InputError:
        """An ``InputError`` located at ``path`` (or the nearest enclosing node that has a position)."""
        probe = path
        while probe and probe not in self.marks:
            probe = probe.rpartition(".")[0]
        line, column = self.marks.get(probe, (None, None))
        return InputError(self.file, message, path=path, line=line, column=column)


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _loader_class() -> type:
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_text(text: str, file: str) -> Document:
    """Compose ``text`` and convert it, refusing aliases, duplicate keys and non-string keys."""
    loader = _loader_class()(text)
    try:
        root = loader.get_single_node()
        doc = Document(file=file, data=None)
        doc.data = _convert(root, "", doc, loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(
            file,
            f"invalid YAML: {problem}",
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:  # reader errors (e.g. control characters) carry no problem_mark
        raise InputError(file, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    return doc


def _position(node: yaml.Node) -> Location:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _convert(node: yaml.Node | None, path: str, doc: Document, loader: Any) -> Any:
    """Plain data for ``node``; a mapping's children are located at their keys, list items at themselves."""
    if node is None:
        return None
    doc.marks.setdefault(path, _position(node))
    if getattr(node, "_seen", False):
        raise doc.error(path, "anchors and aliases are not supported: write the value out")
    node._seen = True  # a node reached twice is an alias; refusing it also defuses alias bombs
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                doc.marks[join(path, "<<")] = _position(key_node)
                raise doc.error(join(path, "<<"), "merge keys ('<<') are not supported: write the keys out")
            if isinstance(key_node, yaml.ScalarNode):
                key = loader.construct_object(key_node, deep=True)
                kind = type(key).__name__
            else:
                key, kind = None, "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
            child = join(path, key if isinstance(key, str) else "?")
            doc.marks[child] = _position(key_node)
            if not isinstance(key, str):
                raise doc.error(child, f"expected a string key, got {kind}")
            if key in out:
                raise doc.error(child, "duplicate key")
            out[key] = _convert(value_node, child, doc, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, join(path, i), doc, loader) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def read_document(path: Path) -> Document:
    """Read ``path`` as strict UTF-8 YAML; every failure is an ``InputError`` naming the file."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(name, f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            name, f"expected UTF-8 text, found byte 0x{raw[exc.start]:02x}", line=line, column=column
        ) from None
    return parse_text(text.removeprefix("\ufeff"), name)
