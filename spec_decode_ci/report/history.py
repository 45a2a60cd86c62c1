"""The trend over many runs' results: acceptance per case and draft position, and engine start time, as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spec_decode_ci.results import ACCEPTANCE_PER_POSITION, ENGINE_START_S


class MissingPlotting(RuntimeError):
    """matplotlib is not installed (the ``report`` extra)."""


def series(runs: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[int, list]], dict[str, list]]:
    """Runs in the order they finished as x labels; per case and position the acceptance of each run (None where
    the run did not measure it); per case and engine run the start seconds."""
    runs = sorted(runs, key=lambda r: r["finished_at"])
    labels = [str(r["step"].get("build_number") or r["finished_at"][:16]) for r in runs]
    acceptance: dict[str, dict[int, list]] = {}
    start: dict[str, list] = {}
    for x, run in enumerate(runs):
        for case in run["cases"]:
            figure = case["figures"].get(ACCEPTANCE_PER_POSITION)
            if isinstance(figure, dict):
                for pos, rate in enumerate(figure.get("measured") or []):
                    acceptance.setdefault(case["id"], {}).setdefault(pos, [None] * len(runs))[x] = rate
            starts = case["figures"].get(ENGINE_START_S)
            if isinstance(starts, dict):
                for name, seconds in starts.items():
                    start.setdefault(f"{case['id']} ({name})", [None] * len(runs))[x] = seconds
    return labels, acceptance, start


def draw(runs: list[dict[str, Any]], output: Path) -> Path:
    """Write the trend picture of ``runs`` to ``output`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on an agent
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingPlotting("--history draws with matplotlib: pip install 'spec-decode-ci[report]'") from None
    labels, acceptance, start = series(runs)
    cases = sorted(acceptance)
    rows = len(cases) + 1
    fig, axes = plt.subplots(rows, 1, figsize=(max(6.0, 0.5 * len(labels) + 3), 2.6 * rows), squeeze=False)
    xs = list(range(len(labels)))
    for ax, case in zip(axes[:, 0], cases):
        for pos, rates in sorted(acceptance[case].items()):
            ax.plot(xs, [float("nan") if r is None else r for r in rates], marker="o", label=f"position {pos}")
        ax.set_title(f"{case}: acceptance per draft position")
        ax.set_ylim(0, 1.05)
        ax.legend(loc="lower left", fontsize="small")
    ax = axes[-1, 0]
    for name, seconds in sorted(start.items()):
        ax.plot(xs, [float("nan") if s is None else s for s in seconds], marker="o", label=name)
    ax.set_title("engine start (s)")
    if start:
        ax.legend(loc="upper left", fontsize="small")
    for ax in axes[:, 0]:
        ax.set_xticks(xs, labels, rotation=45, ha="right", fontsize="small")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial.png")
    fig.savefig(partial, format="png")
    plt.close(fig)
    partial.replace(output)
    return output
