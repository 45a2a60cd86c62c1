"""Every failure of a suite reads: no assertion's message is a bare value.

The e2e suites' assertions live in ``spec_decode_ci.e2e.checks``, a library module pytest does not rewrite, so its
message is all a failure shows: each one is text built in place that says what was expected and what came. In the
suites' own test modules pytest shows both sides of the failed comparison itself; their messages add where to look,
and none of them is a dict or list literal in place of a sentence."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from spec_decode_ci.e2e import checks

SUITES = Path(__file__).resolve().parent
TEXT = (ast.JoinedStr, ast.Constant, ast.BinOp)  # a string, an f-string, text joined or formatted


def asserts(path: Path) -> list[ast.Assert]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Assert)]


def where(path: Path, node: ast.Assert) -> str:
    return f"{path}:{node.lineno}: assert {ast.unparse(node.test)[:80]}, {ast.unparse(node.msg)[:60] if node.msg else '(no message)'}"


def test_the_shared_e2e_checks_say_what_was_expected_and_what_came():
    path = Path(checks.__file__)
    bare = [where(path, a) for a in asserts(path) if not isinstance(a.msg, TEXT)]
    assert not bare, "expected every assertion of the e2e checks to carry a message built as text; came:\n" + \
        "\n".join(bare)


@pytest.mark.parametrize("path", sorted(SUITES.rglob("test_*.py")), ids=lambda p: str(p.relative_to(SUITES)))
def test_no_suite_assertion_message_is_a_dict_or_list(path):
    literal = (ast.Dict, ast.DictComp, ast.List, ast.ListComp, ast.Set, ast.SetComp)
    bare = [where(path, a) for a in asserts(path) if isinstance(a.msg, literal)]
    assert not bare, "expected messages that say where to look, not a literal of values; came:\n" + "\n".join(bare)
