"""Operator mutants of named functions in a module's source: the standard operators of mutmut and cosmic-ray,
each one change at one place, made from the source's syntax tree so that the same source always gives the same
mutants in the same order.

A mutant is named by where it is (``Class.method:line:column``) and said by its operator and the text before and
after; ``Mutant.key`` names it without line numbers (function, operator, before -> after, and which occurrence),
so that an entry about it survives code moving between releases.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

COMPARE_FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
ARITHMETIC_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                    ast.Div: ast.Mult}
DROPPED_METHODS = ("pin_memory", "clone", "contiguous")
# Calls whose only effect is a log line: the tier reads no log, so dropping one is never a behaviour change.
LOGGERS = ("logger", "logging")

OPERATORS = {
    "compare": "a comparison flipped (< <=, > >=, == !=, is / is not, in / not in)",
    "boolean": "and / or swapped",
    "not": "a not dropped",
    "arithmetic": "+ / -, * / //, / -> * swapped",
    "constant": "an integer constant moved by one, a boolean flipped",
    "store": "a subscript store dropped",
    "call": "a bare call dropped",
    "method": "a .pin_memory() / .clone() / .contiguous() dropped",
}


@dataclass(frozen=True)
class Mutant:
    function: str  # the qualified name of the mutated function (Class.method)
    operator: str  # a key of OPERATORS
    line: int  # where the replaced text starts and ends, in the module's file (lines 1-based, columns 0-based,
    column: int  # in characters)
    end_line: int
    end_column: int
    before: str  # the source text replaced
    after: str  # what replaces it
    context: str  # for a constant: the text of the expression it stands in (empty for the others)
    occurrence: int  # 1 + how many earlier mutants of this function have the same operator, text and context

    @property
    def where(self) -> str:
        return f"{self.function}:{self.line}:{self.column}"

    @property
    def key(self) -> str:
        """The mutant without line numbers: stable across releases that only move the code."""
        context = f" in {_one_line(self.context)}" if self.context else ""
        suffix = f" #{self.occurrence}" if self.occurrence > 1 else ""
        return f"{self.function} {self.operator}: {self.change}{context}{suffix}"

    @property
    def change(self) -> str:
        after = self.after[1:-1] if _is_expression(self.after) else self.after
        return f"{_one_line(self.before)} -> {_one_line(after)}"

    def applied_to(self, source: str) -> str:
        """``source`` with the change made, where ``source`` has the module's lines at their numbers (the module's
        source, or one definition's lines after as many empty lines as precede it); every line keeps its
        number."""
        starts = _line_starts(source)
        if len(starts) < self.end_line:
            raise ValueError(f"mutant {self.where} ({self.key}) is past the end of this source ({len(starts)} lines)")
        start, end = starts[self.line - 1] + self.column, starts[self.end_line - 1] + self.end_column
        if source[start:end] != self.before:
            raise ValueError(f"mutant {self.where} ({self.key}) does not match this source: expected "
                             f"{self.before!r} at line {self.line}, found {source[start:end]!r}")
        kept = "\n" * max(self.before.count("\n") - self.after.count("\n"), 0)  # inside the parentheses
        after = self.after[:-1] + kept + ")" if _is_expression(self.after) else self.after + kept
        return source[:start] + after + source[end:]

    def describe(self) -> str:
        return f"{self.where} [{self.operator}] {self.change}"


def _line_starts(source: str) -> list[int]:
    """The offset of each line's first character (lines as Python's parser counts them: split at newlines)."""
    return [0, *(i + 1 for i, c in enumerate(source) if c == "\n")]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _is_expression(after: str) -> bool:
    return after.startswith("(") and after.endswith(")")


def functions_named(tree: ast.Module, qualnames: tuple[str, ...]) -> dict[str, ast.AST]:
    """The function definitions of ``tree`` with these qualified names (``Class.method`` or ``function``); a
    name the module does not define is left out."""
    found: dict[str, ast.AST] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if name in qualnames and not isinstance(child, ast.ClassDef):
                    found[name] = child
                visit(child, name + ".")

    visit(tree, "")
    return found


class _Offsets:
    """Character offsets in a source from the syntax tree's (line, UTF-8 byte column) positions."""

    def __init__(self, source: str):
        self.source = source
        self.starts = _line_starts(source)

    def offset(self, line: int, byte_column: int) -> int:
        text = self.source[self.starts[line - 1]:self.starts[line - 1] + byte_column]  # at least the column's chars
        return self.starts[line - 1] + len(text.encode()[:byte_column].decode(errors="ignore"))

    def column(self, line: int, byte_column: int) -> int:
        return self.offset(line, byte_column) - self.starts[line - 1]


def _skipped_nodes(function: ast.AST) -> set[int]:
    """Nodes no mutant is made in: annotations, docstrings, f-strings (their inner positions are unreliable
    before Python 3.12), log calls, and assertions' messages."""
    skipped: set[int] = set()

    def skip(node: ast.AST | None) -> None:
        if node is not None:
            skipped.update(id(n) for n in ast.walk(node))

    for node in ast.walk(function):
        if isinstance(node, ast.arg):
            skip(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skip(node.returns)
            skip(node.args)  # default values are evaluated once, at definition, not by the function
            for decorator in node.decorator_list:
                skip(decorator)
        elif isinstance(node, ast.AnnAssign):
            skip(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            skip(node)
        elif isinstance(node, ast.Assert):
            skip(node.msg)
        elif isinstance(node, ast.Call) and _call_root(node.func) in LOGGERS:
            skip(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _call_root(node.value.func) in LOGGERS:
            skip(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip(node)  # a docstring
    return skipped


def _call_root(func: ast.AST) -> str | None:
    while isinstance(func, ast.Attribute):
        func = func.value
    return func.id if isinstance(func, ast.Name) else None


def _expression(node: ast.AST) -> str:
    return f"({ast.unparse(node)})"


def _changes(node: ast.AST):
    """(operator, the node replaced, its replacement's text) for each mutant of ``node`` itself."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in COMPARE_FLIPS:
                ops = list(node.ops)
                ops[i] = COMPARE_FLIPS[type(op)]()
                yield "compare", node, _expression(ast.Compare(node.left, ops, node.comparators))
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolean", node, _expression(ast.BoolOp(other, node.values))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not", node, _expression(node.operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC_SWAPS:
        yield "arithmetic", node, _expression(ast.BinOp(node.left, ARITHMETIC_SWAPS[type(node.op)](), node.right))
    elif isinstance(node, ast.AugAssign) and type(node.op) in ARITHMETIC_SWAPS:
        swapped = ast.AugAssign(node.target, ARITHMETIC_SWAPS[type(node.op)](), node.value)
        yield "arithmetic", node, ast.unparse(swapped)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "constant", node, _expression(ast.Constant(not node.value))
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "constant", node, _expression(ast.Constant(node.value + 1))
    elif isinstance(node, (ast.Assign, ast.AugAssign)) and any(
            isinstance(t, ast.Subscript) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
        yield "store", node, "pass"
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "call", node, "pass"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DROPPED_METHODS:
        yield "method", node, _expression(node.func.value)


def _context(source: str, offsets: _Offsets, parent: ast.AST | None) -> str:
    """The text of the expression a constant stands in (its parent node; for a statement, its first line)."""
    if parent is None or not hasattr(parent, "end_lineno"):
        return ""
    text = source[offsets.offset(parent.lineno, parent.col_offset):offsets.offset(parent.end_lineno,
                                                                                  parent.end_col_offset)]
    return text.split("\n")[0].strip() if isinstance(parent, ast.stmt) else text


def mutants_of(source: str, qualnames: tuple[str, ...]) -> list[Mutant]:
    """Every operator mutant of the functions ``qualnames`` of the module whose source is ``source``, in the
    order of ``qualnames`` and then of the source."""
    tree = ast.parse(source)
    offsets = _Offsets(source)
    mutants: list[Mutant] = []
    for name, function in functions_named(tree, qualnames).items():
        skipped = _skipped_nodes(function)
        parents = {id(child): node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
        seen: dict[tuple[str, str, str, str], int] = {}
        found = []
        for node in ast.walk(function):
            if node is function or id(node) in skipped:
                continue
            for operator, replaced, after in _changes(node):
                start = offsets.offset(replaced.lineno, replaced.col_offset)
                end = offsets.offset(replaced.end_lineno, replaced.end_col_offset)
                found.append((start, end, operator, after, replaced))
        for start, end, operator, after, replaced in sorted(found, key=lambda f: f[:4]):
            before = source[start:end]
            context = _context(source, offsets, parents.get(id(replaced))) if operator == "constant" else ""
            count = seen.get((operator, before, after, context), 0) + 1
            seen[(operator, before, after, context)] = count
            mutants.append(Mutant(name, operator, replaced.lineno, offsets.column(replaced.lineno, replaced.col_offset),
                                  replaced.end_lineno, offsets.column(replaced.end_lineno, replaced.end_col_offset),
                                  before, after, context, count))
    return mutants
