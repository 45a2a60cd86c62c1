"""Stage 6, write: atomic replacement of the output, or a drift check that never writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from spec_decode_ci.generator.errors import InputError


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path`` and rename it over: readers see old or new, never half."""
    import tempfile  # write-only path; keeps `--check` start-up lean

    path.parent.mkdir(parents=True, exist_ok=True)
    mode = output_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)  # mkstemp makes 0600; a generated file is as readable as any other
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def output_mode(path: Path) -> int:
    """The existing file's permission bits, or what the umask gives a new file."""
    import stat

    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def emit(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_atomic(Path(path), text)
    except OSError as exc:
        raise InputError(path, f"cannot write output: {exc.strerror or exc}") from None


def drift(path: str, text: str) -> str:
    """A unified diff from the committed file to ``text``; empty when they are byte-identical."""
    try:
        committed = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        committed = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read the committed output: {exc}") from None
    if committed == text:
        return ""
    import difflib  # only on drift

    diff = difflib.unified_diff(
        committed.splitlines(keepends=True), text.splitlines(keepends=True),
        fromfile=f"{path} (committed)", tofile=f"{path} (generated)",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff)
