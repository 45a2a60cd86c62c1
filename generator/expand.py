"""Stage 3, expand: suites × devices -> one ``Step`` per CI job, with Buildkite's key rules enforced."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Callable

from generator.errors import InputError
from generator.model import Device, Matrix, Suite

# Buildkite's pipeline schema: keys match this, are at most 100 characters and must not look like a UUID.
BUILDKITE_KEY_RE = re.compile(r"^[a-zA-Z0-9_\-:${}.,]+$")
BUILDKITE_KEY_MAX = 100
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
BLOCK_PREFIX = "block-"

Locate = Callable[[str, str], InputError]


@dataclass(frozen=True)
class Step:
    suite: Suite
    device: Device
    key: str
    label: str
    junit_path: str
    pytest_command: str

    @property
    def block_key(self) -> str:
        return BLOCK_PREFIX + self.key

    @property
    def block_label(self) -> str:
        return f"Run {self.label}"


def step_key(suite: Suite, device: Device) -> str:
    parts = [suite.key, "nightly" if suite.schedule == "nightly" else None, device.name.replace("_", "-")]
    return "-".join(p for p in parts if p)


def step_label(suite: Suite, device: Device) -> str:
    nightly = " Nightly" if suite.schedule == "nightly" else ""
    return f"{device.emoji} ({device.display_name}) {suite.label}{nightly}"


def pytest_command(suite: Suite, junit_path: str) -> str:
    args = ["python", "-m", "pytest", "-v", "-rs"]
    if suite.markers:
        args += ["-m", suite.markers]
    args += [*suite.tests, f"--junitxml={junit_path}"]
    return shlex.join(args)


def buildkite_key_problem(key: str) -> str | None:
    """Why Buildkite's schema would refuse ``key`` as a step key, or None."""
    if not BUILDKITE_KEY_RE.match(key):
        return f"step key {key!r} has characters outside {BUILDKITE_KEY_RE.pattern}"
    if len(key) > BUILDKITE_KEY_MAX:
        return f"step key {key!r} is {len(key)} characters long; Buildkite allows at most {BUILDKITE_KEY_MAX}"
    if UUID_RE.match(key):
        return f"step key {key!r} looks like a UUID, which Buildkite refuses"
    return None


def expand(matrix: Matrix, locate: Locate) -> list[Step]:
    """All steps of the matrix, sorted by label then key as ci-infra sorts a group."""
    steps: list[Step] = []
    seen: dict[str, str] = {}
    for suite in matrix.suites.values():
        where = f"suites.{suite.name}.key"
        for device_name in suite.devices:
            device = matrix.devices[device_name]
            key = step_key(suite, device)
            for candidate in (key, BLOCK_PREFIX + key):
                problem = buildkite_key_problem(candidate)
                if problem:
                    raise locate(where, f"expected a key Buildkite accepts: {problem}")
            if key in seen:
                raise locate(where, f"duplicate step key {key!r} (also made by suite '{seen[key]}')")
            seen[key] = suite.name
            junit_path = f"{matrix.junit_dir}/{key}.xml"
            steps.append(
                Step(suite, device, key, step_label(suite, device), junit_path, pytest_command(suite, junit_path))
            )
    return sorted(steps, key=lambda s: (s.label, s.key))


def select(steps: list[Step], only: list[str], locate: Locate) -> list[Step]:
    """Just the steps named by ``--only``, in pipeline order; an unknown key is bad input."""
    if not only:
        return steps
    known = {s.key for s in steps}
    for key in only:
        if key not in known:
            raise locate("--only", f"unknown step key {key!r} (expected one of: {', '.join(sorted(known))})")
    return [s for s in steps if s.key in only]
