"""The trend over many runs' results: acceptance per case and draft position, the speedup per case, and engine start
time, as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spec_decode_ci.results import ACCEPTANCE_PER_POSITION, ENGINE_START_S, SPEED, step_key


class MissingPlotting(RuntimeError):
    """matplotlib is not installed (the ``report`` extra)."""


def _build(run: dict[str, Any]) -> str:
    return str(run["step"].get("build_number") or run["finished_at"][:16])


def series(runs: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[int, list]], dict[str, list],
                                                dict[str, list]]:
    """Builds in the order they finished as x labels (runs of several steps in one build share one); per case and
    position the acceptance in each build (None where it was not measured); per case and engine the start
    seconds; per case the speedup. A case is named with its step where the runs come from several steps."""
    runs = sorted(runs, key=lambda r: r["finished_at"])
    labels = list(dict.fromkeys(_build(r) for r in runs))
    several = len({step_key(r) for r in runs}) > 1
    acceptance: dict[str, dict[int, list]] = {}
    start: dict[str, list] = {}
    speedup: dict[str, list] = {}
    for run in runs:
        x = labels.index(_build(run))
        for case in run["cases"]:
            name = f"{step_key(run)}: {case['id']}" if several else case["id"]
            figure = case["figures"].get(ACCEPTANCE_PER_POSITION)
            if isinstance(figure, dict):
                for pos, rate in enumerate(figure.get("measured") or []):
                    acceptance.setdefault(name, {}).setdefault(pos, [None] * len(labels))[x] = rate
            starts = case["figures"].get(ENGINE_START_S)
            if isinstance(starts, dict):
                for engine, seconds in starts.items():
                    start.setdefault(f"{name} ({engine})", [None] * len(labels))[x] = seconds
            speed = case["figures"].get(SPEED)
            if isinstance(speed, dict) and isinstance(speed.get("speedup"), (int, float)):
                speedup.setdefault(name, [None] * len(labels))[x] = speed["speedup"]
    return labels, acceptance, start, speedup


def draw(runs: list[dict[str, Any]], output: Path) -> Path:
    """Write the trend picture of ``runs`` to ``output`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on an agent
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingPlotting("--history draws with matplotlib: pip install 'spec-decode-ci[report]'") from None
    labels, acceptance, start, speedup = series(runs)
    cases = sorted(acceptance)
    rows = len(cases) + 2
    fig, axes = plt.subplots(rows, 1, figsize=(max(6.0, 0.5 * len(labels) + 3), 2.6 * rows), squeeze=False)
    xs = list(range(len(labels)))
    for ax, case in zip(axes[:, 0], cases):
        for pos, rates in sorted(acceptance[case].items()):
            ax.plot(xs, [float("nan") if r is None else r for r in rates], marker="o", label=f"position {pos}")
        ax.set_title(f"{case}: acceptance per draft position")
        ax.set_ylim(0, 1.05)
        ax.legend(loc="lower left", fontsize="small")
    ax = axes[-2, 0]
    for name, ratios in sorted(speedup.items()):
        ax.plot(xs, [float("nan") if r is None else r for r in ratios], marker="o", label=name)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_title("speedup (speculative tokens/s over the target alone's)")
    if speedup:
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
