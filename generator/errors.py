"""The one error type the generator raises for bad input: it always names file, location and expectation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class InputError(Exception):
    """Bad input, reported as ``file:line:col: path: message`` on stderr with exit status 2."""

    file: str
    message: str
    path: str = ""
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        subject = f"{self.path}: " if self.path else ""
        return f"{where}: {subject}{self.message}"
