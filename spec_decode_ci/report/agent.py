"""The report's calls of ``buildkite-agent``: annotate the build, fetch an earlier build's results file."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

AGENT = "buildkite-agent"


def present() -> bool:
    """Whether this runs on a Buildkite agent (its CLI on PATH)."""
    return shutil.which(AGENT) is not None


def annotate(body: str, context: str, style: str) -> None:
    """Add or replace the build's annotation ``context`` (body on stdin: annotations outgrow argv)."""
    subprocess.run([AGENT, "annotate", "--context", context, "--style", style], input=body, text=True, check=True)


def download(artifact: str, build: str) -> tuple[Path | None, str]:
    """``artifact`` (its path as the step uploaded it) from build ``build`` into a new folder: (the folder, '') or
    (None, why not)."""
    if not present():
        return None, f"{AGENT} is not on PATH"
    into = Path(tempfile.mkdtemp(prefix="spec-decode-baseline-"))
    done = subprocess.run([AGENT, "artifact", "download", artifact, str(into), "--build", build],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0 or not any(into.rglob("*.json")):
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, f"build {build} has no {artifact}" + (f" ({said[-1]})" if said else "")
    return into, ""
