"""`generate-pipeline`: hardware_matrix.yaml -> vLLM test-area file or native Buildkite pipeline.

Exit status: 0 ok, 1 the committed output drifted (``--check``), 2 bad input. The pipeline is
load -> model -> expand -> render -> validate -> write; only the two ends touch the file system.
``generate-pipeline import PATH`` turns an existing test-area file into a matrix; ``generate-pipeline upstream
PATH`` compares the matrix's vLLM steps with vLLM's own file at PATH (exit 1 where they differ).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.names import MATRIX_NAME, matrix_above

TEST_AREA_OUTPUT = Path(".buildkite") / "test_areas" / "spec_decode.yaml"
EXIT_OK, EXIT_DRIFT, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit 2, like every other bad input
        self.exit(EXIT_BAD_INPUT, f"generate-pipeline: command line: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="generate-pipeline", description=__doc__.splitlines()[0])
    p.add_argument("--format", choices=("test-area", "buildkite"), default="test-area",
                   help="vLLM test-area file (default) or a native pipeline for `buildkite-agent pipeline upload`")
    p.add_argument("--output", help=f"file to write, '-' for stdout (default: {TEST_AREA_OUTPUT} for test-area, "
                                    "stdout for buildkite)")
    p.add_argument("--matrix", help=f"hardware matrix (default: {MATRIX_NAME} in the current directory or a parent)")
    p.add_argument("--nightly", action="store_true",
                   help="native pipeline for a nightly build: no block gates (also when NIGHTLY=1)")
    p.add_argument("--on-demand", action="store_true", help="native pipeline without block gates: run the steps now")
    p.add_argument("--only", action="append", default=[], metavar="KEY", help="just this step (repeatable)")
    p.add_argument("--list", action="store_true",
                   help="print each step (key, device, queue, image, optional, timeout, label) and its commands, then exit")
    p.add_argument("--check", action="store_true",
                   help="compare with the committed output; print a diff and exit 1 on drift; never writes")
    return p


def build_import_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="generate-pipeline import",
                description="Read a vLLM test-area file and write a hardware matrix that regenerates it.")
    p.add_argument("path", help="a test-area file, e.g. vLLM's .buildkite/test_areas/spec_decode.yaml")
    p.add_argument("--output", default="-", help="matrix file to write (default: stdout)")
    return p


def build_upstream_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="generate-pipeline upstream",
                description="Compare the matrix's copy of vLLM's steps with vLLM's own test-area file: per step kept, "
                            "changed (which keys), added or removed; exit 1 on a difference.")
    p.add_argument("path", help="vLLM's test-area file, e.g. a vLLM checkout's .buildkite/test_areas/spec_decode.yaml")
    p.add_argument("--matrix", help=f"hardware matrix (default: {MATRIX_NAME} in the current directory or a parent)")
    return p


def find_repo_root(start: Path) -> Path | None:
    matrix = matrix_above(start)
    return matrix.parent if matrix else None


def format_table(steps) -> str:
    rows = [("KEY", "DEVICE", "QUEUE", "IMAGE", "OPTIONAL", "TIMEOUT", "LABEL")]
    rows += [(s.key or "-", s.device.test_area_device if s.device else "-", s.queue, s.image.build_step or "-",
              "yes" if s.optional else "no",
              f"{s.timeout_in_minutes}m" if s.timeout_in_minutes else "-", s.label) for s in steps]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(rows[0], widths)).rstrip() + "\n"]
    for step, row in zip(steps, rows[1:]):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
        lines += [f"    $ {command}\n" for command in step.commands]
    return "".join(lines)


def check_combinations(args: argparse.Namespace) -> None:
    """Refuse flags that would be accepted and do nothing."""
    if args.format == "test-area" and (args.nightly or args.on_demand):
        flag = "--nightly" if args.nightly else "--on-demand"
        raise InputError("command line", f"{flag} only changes the native pipeline; add --format buildkite")
    if args.list and (args.check or args.output):
        raise InputError("command line", f"--list prints and exits; it takes no {'--check' if args.check else '--output'}")
    if args.check and args.output == "-":
        raise InputError("--output", "--check compares with a file; '-' (stdout) has nothing committed")
    if args.check and args.output is None and args.format == "buildkite":
        raise InputError("command line", "--check needs --output FILE with --format buildkite (it writes to stdout)")


def matrix_of(args: argparse.Namespace, root: Path | None) -> Path:
    if args.matrix:
        return Path(args.matrix)
    if root is not None:
        return root / MATRIX_NAME
    raise InputError(MATRIX_NAME, "not found in the current directory or any parent; pass --matrix")


def run(args: argparse.Namespace, environ: dict[str, str]) -> int:
    from spec_decode_ci.generator import expand, load, model, render, validate, write

    check_combinations(args)
    root = find_repo_root(Path.cwd())
    matrix_path = matrix_of(args, root)
    if args.output:
        output = args.output
    elif args.format == "test-area":
        output = str((root or matrix_path.parent) / TEST_AREA_OUTPUT)
    else:
        output = "-"

    doc = load.read_document(matrix_path)
    matrix = model.parse_matrix(doc)
    steps = expand.select(expand.expand(matrix, doc.error, args.format), args.only,
                          lambda path, msg: InputError("command line", msg, path=path))
    if args.list:
        sys.stdout.write(format_table(steps))
        return EXIT_OK

    nightly = args.nightly or environ.get("NIGHTLY") == "1"
    options = render.RenderOptions(args.format, gated=not (nightly or args.on_demand))
    text, data = render.render(matrix, steps, options)
    if args.format == "test-area":
        validate.check_test_area_keys(data, output)
    validate.check_round_trip(text, data, output)

    if args.check:
        diff = write.drift(output, text)
        if diff:
            sys.stdout.write(diff)
            sys.stderr.write(f"generate-pipeline: {output} is out of date; run `generate-pipeline` and commit it\n")
            return EXIT_DRIFT
        return EXIT_OK
    write.emit(output, text)
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    from spec_decode_ci.generator import importer, load, write

    text = importer.import_test_area(load.read_document(Path(args.path)))
    write.emit(args.output, text)
    return EXIT_OK


def run_upstream(args: argparse.Namespace) -> int:
    from spec_decode_ci.generator import load, model, upstream

    doc = load.read_document(matrix_of(args, find_repo_root(Path.cwd())))
    drift = upstream.compare(model.parse_matrix(doc), load.read_document(Path(args.path)), doc.error)
    sys.stdout.write(drift.text())
    return EXIT_DRIFT if drift.differs else EXIT_OK


SUBCOMMANDS = {"import": (build_import_parser, run_import), "upstream": (build_upstream_parser, run_upstream)}


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    sub = SUBCOMMANDS.get(argv[0]) if argv else None
    args = sub[0]().parse_args(argv[1:]) if sub else build_parser().parse_args(argv)
    try:
        if sub:
            return sub[1](args)
        return run(args, dict(os.environ) if environ is None else environ)
    except InputError as exc:
        sys.stderr.write(f"generate-pipeline: {exc}\n")
        return EXIT_BAD_INPUT
    except RecursionError:
        target = getattr(args, "matrix", None) or getattr(args, "path", None) or MATRIX_NAME
        sys.stderr.write(f"generate-pipeline: {target}: expected a shallow document, nesting is too deep\n")
        return EXIT_BAD_INPUT


def main_entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    main_entry()
