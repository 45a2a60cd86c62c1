"""`generate-pipeline`: hardware_matrix.yaml -> vLLM test-area file or native Buildkite pipeline.

Exit status: 0 ok, 1 the committed output drifted (``--check``), 2 bad input. The pipeline is
load -> model -> expand -> render -> validate -> write; only the two ends touch the file system.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from generator.errors import InputError

MATRIX_NAME = "hardware_matrix.yaml"
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
    p.add_argument("--matrix", help=f"hardware matrix (default: {MATRIX_NAME} in the repo root)")
    p.add_argument("--nightly", action="store_true",
                   help="generate for a nightly build: no block gates (also when NIGHTLY=1)")
    p.add_argument("--on-demand", action="store_true", help="no block gates: run the selected steps now")
    p.add_argument("--only", action="append", default=[], metavar="KEY", help="just this step (repeatable)")
    p.add_argument("--list", action="store_true", help="print the steps as a table and exit")
    p.add_argument("--check", action="store_true",
                   help="compare with the committed output; print a diff and exit 1 on drift; never writes")
    return p


def find_repo_root(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        if (directory / MATRIX_NAME).is_file():
            return directory
    return None


def format_table(steps) -> str:
    rows = [("KEY", "LABEL", "DEVICE", "QUEUE", "SCHEDULE", "OPTIONAL", "TIMEOUT")]
    rows += [(s.key, s.label, s.device.name, s.device.queue, s.suite.schedule,
              "yes" if s.suite.optional else "no", f"{s.suite.timeout_in_minutes}m") for s in steps]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def run(args: argparse.Namespace, environ: dict[str, str]) -> int:
    from generator import expand, load, model, render, validate, write

    root = find_repo_root(Path.cwd())
    if args.matrix:
        matrix_path = Path(args.matrix)
    elif root is not None:
        matrix_path = root / MATRIX_NAME
    else:
        raise InputError(MATRIX_NAME, "not found in the current directory or any parent; pass --matrix")
    if args.output:
        output = args.output
    elif args.format == "test-area":
        output = str((root or matrix_path.parent) / TEST_AREA_OUTPUT)
    else:
        output = "-"
    if args.check and output == "-":
        raise InputError("--output", "--check compares with a file; '-' (stdout) has nothing committed")

    doc = load.read_document(matrix_path)
    matrix = model.parse_matrix(doc)
    steps = expand.select(expand.expand(matrix, doc.error), args.only,
                          lambda path, msg: InputError("command line", msg, path=path))
    if args.list:
        sys.stdout.write(format_table(steps))
        return EXIT_OK

    nightly = args.nightly or environ.get("NIGHTLY") == "1"
    options = render.RenderOptions(args.format, gated=not (nightly or args.on_demand), matrix_name=matrix_path.name)
    text = render.render_text(matrix, steps, options)
    expected = render.output_dict(matrix, steps, options)
    if args.format == "test-area":
        validate.check_test_area_keys(expected, output)
    validate.check_round_trip(text, expected, output)

    if args.check:
        diff = write.drift(output, text)
        if diff:
            sys.stdout.write(diff)
            sys.stderr.write(f"generate-pipeline: {output} is out of date; run `generate-pipeline` and commit it\n")
            return EXIT_DRIFT
        return EXIT_OK
    write.emit(output, text)
    return EXIT_OK


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args, dict(os.environ) if environ is None else environ)
    except InputError as exc:
        sys.stderr.write(f"generate-pipeline: {exc}\n")
        return EXIT_BAD_INPUT
    except RecursionError:
        target = args.matrix or MATRIX_NAME
        sys.stderr.write(f"generate-pipeline: {target}: expected a shallow document, nesting is too deep\n")
        return EXIT_BAD_INPUT


def main_entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    main_entry()
