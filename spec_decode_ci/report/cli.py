"""``spec-decode-ci report``: a run's results as a Buildkite annotation, against a baseline, or as a trend.

Exit status: 0 when the report was made (whatever the tests' verdict: the step keeps the tests' own status),
2 for bad input (a results file that cannot be read, named with its key, on one line), 1 when
``buildkite-agent annotate`` refused the annotation.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from spec_decode_ci import __version__, results
from spec_decode_ci.generator.names import BASELINE_BUILD_ENV
from spec_decode_ci.report import agent
from spec_decode_ci.report.compare import ACCEPTANCE_TOLERANCE, SPEED_TOLERANCE, START_RATIO, baseline_for, compare
from spec_decode_ci.report.history import MissingPlotting, draw
from spec_decode_ci.report.markdown import red, render

PROG = "spec-decode-ci"
SEPARATOR = "\n---\n\n"


class ReportError(Exception):
    """Bad input to the report, said in one line."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    top.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = top.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="annotate a build with a run's results (or print them)",
                                 description="From results files (--spec-decode-results) write the Markdown "
                                             "annotation of each run; with --history, the trend picture.")
    report.add_argument("results", nargs="*", type=Path, metavar="RESULTS",
                        help="results files, or folders of them (*.json)")
    given = report.add_mutually_exclusive_group()
    given.add_argument("--baseline", type=Path, metavar="FILE_OR_DIR", help="earlier results to compare with")
    given.add_argument("--baseline-build", metavar="BUILD",
                       help="compare with the same results file of this Buildkite build (downloaded as an artifact; "
                            f"empty: the pipeline named none, ${BASELINE_BUILD_ENV})")
    report.add_argument("--context", help="the annotation's context (default: the step key)")
    report.add_argument("--tolerance", type=float, default=ACCEPTANCE_TOLERANCE,
                        help=f"acceptance per draft position that moved less than this is not marked "
                             f"(default {ACCEPTANCE_TOLERANCE})")
    report.add_argument("--start-ratio", type=float, default=START_RATIO,
                        help=f"engine start over this many times the baseline's is marked (default {START_RATIO})")
    report.add_argument("--speed-tolerance", type=float, default=SPEED_TOLERANCE,
                        help=f"a speedup or tokens/s this share below the baseline's is marked (default "
                             f"{SPEED_TOLERANCE})")
    report.add_argument("--history", type=Path, metavar="DIR", help="draw the trend over every results file here")
    report.add_argument("--output", type=Path, metavar="PATH",
                        help="write the Markdown (or, with --history, the PNG) here instead of annotating/printing")
    report.add_argument("--print", action="store_true", dest="print_only",
                        help="print the Markdown even where buildkite-agent is on PATH")
    return top


def _load(paths, what: str) -> list[dict[str, Any]]:
    runs = results.load_all(paths)
    if not runs:
        raise ReportError(f"{', '.join(map(str, paths))}: expected {what} (*.json), found none")
    return runs


def baselines(args, runs_paths: list[Path]) -> tuple[list[dict[str, Any]], str]:
    """The candidate baseline runs, and what the annotation says of them when none matches."""
    if args.baseline is not None:
        return _load([args.baseline], "baseline results files"), f"No baseline: no run of this step in {args.baseline}."
    if args.baseline_build is None:
        return [], "No baseline: none given (--baseline, --baseline-build)."
    build = args.baseline_build.strip()
    if not build:
        return [], f"No baseline: the pipeline named no earlier build (${BASELINE_BUILD_ENV} is empty)."
    found, missing = [], []
    for path in runs_paths:
        folder, why = agent.download(str(path), build)
        if folder is None:
            missing.append(why)
            continue
        try:
            found += results.load_all([folder])
        except results.ResultsError as exc:
            missing.append(f"build {build}'s results cannot be read: {exc}")
    return found, "No baseline: " + ("; ".join(missing) or f"build {build} has no results of this step") + "."


def annotation(runs: list[dict[str, Any]], candidates: list[dict[str, Any]], none_found: str,
               tolerance: float, start_ratio: float, speed_tolerance: float = SPEED_TOLERANCE) -> tuple[str, str]:
    """The Markdown of every run, and the annotation style (error: a test red; warning: a figure worse)."""
    bodies, worse = [], False
    for run in runs:
        baseline = baseline_for(run, candidates)
        if baseline is None:
            line = none_found
        else:
            number = baseline["step"].get("build_number")
            line = (f"Compared with {'build ' + str(number) if number else 'the baseline'} "
                    f"(vLLM {baseline['vllm'].get('version') or '?'}, finished {baseline['finished_at']}).")
        marks = compare(run, baseline, tolerance, start_ratio, speed_tolerance)
        worse = worse or any(m.worse for m in marks)
        bodies.append(render(run, marks, line))
    style = "error" if any(red(r) for r in runs) else "warning" if worse else "success"
    return SEPARATOR.join(bodies), style


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def report(args) -> int:
    if args.history is not None:
        if args.output is None:
            raise ReportError("--history: expected --output PATH (where the PNG goes)")
        print(draw(_load([args.history, *args.results], "results files"), args.output))
        return 0
    if not args.results:
        raise ReportError("expected at least one RESULTS file or folder")
    runs = _load(args.results, "results files")
    candidates, none_found = baselines(args, [p for p in args.results if not p.is_dir()])
    body, style = annotation(runs, candidates, none_found, args.tolerance, args.start_ratio, args.speed_tolerance)
    context = args.context or results.step_key(runs[0]) or PROG
    if args.output is not None:
        write_text(args.output, body)
    elif agent.present() and not args.print_only:
        agent.annotate(body, context, style)
    else:
        sys.stdout.write(body)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return report(args)
    except (results.ResultsError, ReportError, MissingPlotting) as exc:
        print(f"{PROG} report: error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"{PROG} report: error: {' '.join(exc.cmd[:2])} exited {exc.returncode}", file=sys.stderr)
        return 1


def main_entry() -> None:
    sys.exit(main())
