"""Stage 3, expand: the matrix's test-area steps, plus suites × devices, -> one ``Step`` per CI job.

A ``Step`` carries its fields in test-area terms (what ci-infra reads); ``render`` turns them into either
output format. Buildkite's key rules and key uniqueness across both kinds of step are enforced here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from spec_decode_ci.generator.errors import InputError
from spec_decode_ci.generator.model import VLLM_NIGHTLY, Device, Matrix, Suite
from spec_decode_ci.generator.ci_infra_keys import BUILDKITE_KEY_RE
from spec_decode_ci.generator.steps import AreaStep
from spec_decode_ci.generator.names import BASELINE_BUILD_ENV, CAPABILITIES_ENV, DEVICE_ENV, RESULTS_DIR, RESULTS_OPTION
from spec_decode_ci.generator.routing import Image, image_for, queue_for

# Buildkite's pipeline schema: keys match BUILDKITE_KEY_RE, are at most 100 characters and must not look like a UUID.
BUILDKITE_KEY_MAX = 100
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
BLOCK_PREFIX = "block-"
PLUGIN = "spec_decode_ci.pytest_plugin"

Locate = Callable[[str, str], InputError]


@dataclass(frozen=True)
class Step:
    """One CI job. ``fields`` are test-area keys in output order, device names resolved to device strings."""

    key: str | None
    label: str
    device: Device | None
    fields: tuple[tuple[str, Any], ...]
    suite: Suite | None = None  # None for a test-area step written in the matrix
    junit_path: str | None = None
    results_path: str | None = None  # the results file its tests write (spec_decode_ci.results)
    run_command: str | None = None  # the pytest command of a suite step
    vllm: str | None = None  # the vLLM release a compatibility-lane step installs first

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.fields).get(key, default)

    @property
    def optional(self) -> bool:
        return bool(self.get("optional", False))

    @property
    def timeout_in_minutes(self) -> int | None:
        return self.get("timeout_in_minutes")

    @property
    def queue(self) -> str:
        return queue_for(self.device.test_area_device if self.device else None, self.get("num_devices"))

    @property
    def image(self) -> Image:
        """The vLLM image ci-infra runs this step in."""
        return image_for(self.device.test_area_device if self.device else None)

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(self.get("commands", ()))

    @property
    def block_key(self) -> str:
        return BLOCK_PREFIX + (self.key or "")

    @property
    def block_label(self) -> str:
        return f"Run {self.label}"


def step_key(suite: Suite, device: Device, vllm: str | None = None) -> str:
    release = f"vllm-{vllm.replace('.', '-')}" if vllm and vllm != VLLM_NIGHTLY else None
    parts = [suite.key, release, "nightly" if suite.schedule == "nightly" else None, device.name.replace("_", "-")]
    return "-".join(p for p in parts if p)


def step_label(suite: Suite, device: Device, vllm: str | None = None) -> str:
    release = (" on vLLM main (nightly wheel)" if vllm == VLLM_NIGHTLY else f" on vLLM {vllm}") if vllm else ""
    nightly = " Nightly" if suite.schedule == "nightly" else ""
    return f"{device.emoji} ({device.display_name}) {suite.label}{release}{nightly}"


def pytest_command(suite: Suite, junit_path: str, results_path: str) -> str:
    args = ["python", "-m", "pytest", "-p", PLUGIN, "-v", "-rs"]
    if suite.markers:
        args += ["-m", suite.markers]
    if suite.workers > 1:
        args += ["-n", str(suite.workers)]
    args += ["--pyargs", *suite.tests, f"--junitxml={junit_path}", f"{RESULTS_OPTION}={results_path}"]
    return shlex.join(args)


def report_command(step_key: str, results_path: str, nightly: bool) -> str:
    """``spec-decode-ci report`` of a suite step: its annotation (context: the step key); a nightly compares with
    the build the pipeline names in ``BASELINE_BUILD_ENV`` (empty: the annotation says there is no baseline)."""
    command = shlex.join(["spec-decode-ci", "report", results_path, "--context", step_key])
    return command + (f' --baseline-build "$${{{BASELINE_BUILD_ENV}:-}}"' if nightly else "")


def keep_status(command: str, after: list[str]) -> str:
    """Run ``command``, then each of ``after`` whatever happened (none of them can fail the step), and exit with
    ``command``'s status. It holds under ``bash -e`` and where ci-infra joins a step's commands with ``&&``;
    ``$$`` is Buildkite's escape for a ``$`` the shell sees."""
    return " ".join([f"{command} && status=0 || status=$$?;", *(f"{c} || true;" for c in after), "exit $$status"])


def upload(*paths: str) -> str:
    return shlex.join(["buildkite-agent", "artifact", "upload", ";".join(paths)])


def pip_install(requirement: str) -> str:
    return shlex.join(["python", "-m", "pip", "install", "--quiet", requirement])


def vllm_install(matrix: Matrix, vllm: str) -> str:
    """The command that installs the vLLM a step runs on (a release, or the nightly wheel), through the harness's
    one installer (``spec_decode_ci.install_vllm``), so it runs after the harness is installed."""
    args = ["python", "-m", "spec_decode_ci.install_vllm", vllm]
    if vllm == VLLM_NIGHTLY:
        args += ["--index-url", matrix.vllm_nightly_index]
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


def _resolve_devices(fields: tuple[tuple[str, Any], ...], matrix: Matrix) -> tuple[tuple[str, Any], ...]:
    out = []
    for name, value in fields:
        if name == "device":
            value = matrix.devices[value].test_area_device
        elif name == "mirror":
            value = tuple((vendor, _resolve_devices(body, matrix)) for vendor, body in value)
        out.append((name, value))
    return tuple(out)


def area_step(matrix: Matrix, step: AreaStep) -> Step:
    device = matrix.devices[step.get("device")] if step.get("device") else None
    return Step(step.key, step.label, device, _resolve_devices(step.fields, matrix))


def suite_step(matrix: Matrix, suite: Suite, device: Device, vllm: str | None = None) -> Step:
    key = step_key(suite, device, vllm)
    junit_path, results_path = f"{matrix.junit_dir}/{key}.xml", f"{RESULTS_DIR}/{key}.json"
    run = pytest_command(suite, junit_path, results_path)
    fields: list[tuple[str, Any]] = [("label", step_label(suite, device, vllm)), ("key", key),
                                     ("device", device.test_area_device), ("num_devices", suite.num_devices),
                                     ("timeout_in_minutes", suite.timeout_in_minutes)]
    if suite.optional:
        fields.append(("optional", True))
    if suite.soft_fail:
        fields.append(("soft_fail", True))
    if device.depends_on is not None:
        fields.append(("depends_on", device.depends_on))
    fields.append(("mount_buildkite_agent", True))
    fields.append(("source_file_dependencies", suite.source_file_dependencies))
    machine = ((DEVICE_ENV, device.name), (CAPABILITIES_ENV, ",".join(device.capabilities)))
    fields.append(("env", (*machine, *suite.env)))
    install = [pip_install(matrix.harness_requirement)]
    if vllm:
        install.append(vllm_install(matrix, vllm))
    report = report_command(key, results_path, suite.schedule == "nightly")
    fields.append(("commands", (*install, keep_status(run, [report, upload(junit_path, results_path)]))))
    return Step(key, fields[0][1], device, tuple(fields), suite, junit_path=junit_path, results_path=results_path,
                run_command=run, vllm=vllm)


def expand(matrix: Matrix, locate: Locate, pipeline: str = "test-area") -> list[Step]:
    """The steps of ``pipeline``: the matrix's test-area steps in order (test area only), then its suites'
    steps sorted by label then key as ci-infra sorts a group."""
    steps: list[Step] = []
    seen: dict[str, str] = {}

    def claim(key: str | None, where: str, owner: str) -> None:
        if key is None:
            return
        for candidate in (key, BLOCK_PREFIX + key):
            problem = buildkite_key_problem(candidate)
            if problem:
                raise locate(where, f"expected a key Buildkite accepts: {problem}")
        if key in seen:
            raise locate(where, f"duplicate step key {key!r} (also used by {seen[key]}): give ours a key of its own")
        seen[key] = owner

    for step in matrix.steps:
        claim(step.key, f"steps.{step.index}.key", f"step {step.index + 1}")
        if pipeline == "test-area":
            steps.append(area_step(matrix, step))
    suite_steps = []
    for suite in matrix.suites.values():
        for device_name in suite.devices:
            for vllm in suite.vllm or (None,):
                step = suite_step(matrix, suite, matrix.devices[device_name], vllm)
                claim(step.key, f"suites.{suite.name}.key", f"suite '{suite.name}'")
                if pipeline in suite.pipelines:
                    suite_steps.append(step)
    return steps + sorted(suite_steps, key=lambda s: (s.label, s.key))


def select(steps: list[Step], only: list[str], locate: Locate) -> list[Step]:
    """Just the steps named by ``--only``, in pipeline order; an unknown key is bad input."""
    if not only:
        return steps
    known = {s.key for s in steps if s.key}
    for key in only:
        if key not in known:
            raise locate("--only", f"unknown step key {key!r} (expected one of: {', '.join(sorted(known))})")
    return [s for s in steps if s.key in only]
