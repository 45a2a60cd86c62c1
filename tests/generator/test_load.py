"""Stage 1: YAML that PyYAML would accept silently, or crash on, becomes one located error."""

from __future__ import annotations

import pytest

from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.load import parse_text, read_document


def test_positions_are_recorded_for_nested_values():
    doc = parse_text("a:\n  b:\n    - x\n    - y\n", "m.yaml")
    assert doc.data == {"a": {"b": ["x", "y"]}}
    assert doc.marks["a.b.1"] == (4, 7)
    assert str(doc.error("a.b.1.missing", "boom")) == "m.yaml:4:7: a.b.1.missing: boom"


@pytest.mark.parametrize(
    "text, fragment, line",
    [
        ("a: 1\na: 2\n", "a: duplicate key", 2),
        ("a: &x [1]\nb: *x\n", "anchors and aliases are not supported", 2),
        ("a: [1, 2\n", "invalid YAML", 2),
        ("base: &b {k: 1}\nother:\n  <<: *b\n", "merge keys", 3),
        ("? [1, 2]\n: v\n", "expected a string key, got list", 1),
        ("1: v\n", "expected a string key, got int", 1),
        ("a: b\n--- \nc: d\n", "invalid YAML", 2),
    ],
)
def test_bad_yaml_is_located(text, fragment, line):
    with pytest.raises(InputError) as info:
        parse_text(text, "m.yaml")
    assert fragment in str(info.value)
    assert info.value.line == line


def test_alias_bomb_is_refused_quickly():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    with pytest.raises(InputError, match="aliases are not supported"):
        parse_text("\n".join(lines) + "\n", "bomb.yaml")


def test_non_utf8_bytes_are_located(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(InputError) as info:
        read_document(path)
    assert (info.value.line, info.value.column) == (2, 7)
    assert "expected UTF-8 text, found byte 0xe9" in str(info.value)


def test_control_characters_are_yaml_errors(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes(b"a: \x07\n")
    with pytest.raises(InputError, match="invalid YAML"):
        read_document(path)


def test_unreadable_file_names_itself(tmp_path):
    with pytest.raises(InputError) as info:
        read_document(tmp_path / "absent.yaml")
    assert str(info.value).startswith(str(tmp_path / "absent.yaml"))
    assert "cannot read file" in str(info.value)


def test_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes("\ufeffa: 1\n".encode())
    assert read_document(path).data == {"a": 1}
