"""Stage 2, model: the hardware matrix as plain dataclasses, parsed from a located ``Document``.

Every key is declared here; an unknown key is an error naming its line and the closest valid key
(ci-infra would drop it silently), and every type error names the key's position and what was expected.

The matrix has three kinds of entries:
- ``devices``: one block per kind of agent (test-area device string, capabilities, how to recognise it);
- ``steps``: test-area steps written exactly as ci-infra reads them (vLLM's own spec-decode steps);
- ``suites``: the harness's pytest suites, expanded into one step per device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from spec_decode_ci.generator.load import Document, join, read_document
from spec_decode_ci.generator.readers import (
    Section, boolean, env_mapping, integer, one_of, patterned, requirement, section, text, text_list,
)
from spec_decode_ci.generator.routing import NEEDS, image_for
from spec_decode_ci.generator.steps import RENAMED, AreaStep, _steps, device_ref

SCHEDULES = ("nightly", "every_change")
PIPELINES = ("test-area", "buildkite")
CAPABILITY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
DEVICE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
STEP_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9\-]*$")
COMPUTE_CAPABILITY_RE = re.compile(r"^\d+\.\d+$")
MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
VERSION_RE = re.compile(r"^\d+(\.\d+)*$")


@dataclass(frozen=True)
class Device:
    """A kind of CI agent: its test-area device string, what its hardware can do, how to recognise it."""

    name: str
    test_area_device: str  # the `device:` string of vLLM test-area files; ci-infra routes it to a queue
    display_name: str | None  # shown in suite labels: "(B200)"
    emoji: str | None  # Buildkite emoji prefix of suite labels
    gpu_name: str | None  # a substring of torch.cuda.get_device_name() on this agent
    memory_gib: int | None  # GPU memory a process sees (tells MIG slices of one GPU apart)
    compute_capability: str | None
    gpus_per_agent: int | None  # 0 for a CPU agent; None where the matrix does not say
    capabilities: tuple[str, ...]
    depends_on: tuple[str, ...] | None  # image builds a suite step on this device waits for
    sm_count: int | None = None  # streaming multiprocessors of one GPU (an emulated GPU of this device reports it)
    # attention backend -> the least CUDA-graph runtime mode (CUDA_GRAPH_MODES) vLLM must dispatch for the uniform
    # speculative-decoding batches (1 + k queries a request) of a target on this device; checked by the e2e tier
    spec_decode_cuda_graphs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Suite:
    """A pytest suite of the harness and the CI steps that run it, one per device."""

    name: str
    key: str  # step key stem; the step key adds the schedule and device
    label: str
    devices: tuple[str, ...]
    schedule: str
    optional: bool
    soft_fail: bool
    timeout_in_minutes: int
    num_devices: int
    source_file_dependencies: tuple[str, ...]
    tests: tuple[str, ...]  # importable test packages or modules (pytest --pyargs)
    markers: str | None
    env: tuple[tuple[str, str], ...]
    pipelines: tuple[str, ...]  # which outputs carry it: the test area, the native pipeline, or both
    vllm: tuple[str, ...]  # released vLLMs to install first, a step each (compatibility lane); (): the one present
    needs: tuple[str, ...] = ()  # what the suite needs of the image its device runs in (routing.NEEDS)
    workers: int = 1  # pytest-xdist processes on the agent (-n); 1: none


@dataclass(frozen=True)
class Matrix:
    group: str | None
    depends_on: tuple[str, ...] | None
    harness_requirement: str  # what the suite steps pip-install: harness.requirement, else this version's release
    setup_commands: tuple[str, ...]
    junit_dir: str
    devices: dict[str, Device]
    steps: tuple[AreaStep, ...]
    suites: dict[str, Suite]
    vllm_nightly_index: str | None = None  # the package index of vLLM's nightly wheels (suites with vllm: nightly)
    vllm_sources: dict[str, tuple[str, ...]] | None = None  # named sets of vLLM's source paths suites depend on

    def devices_with(self, capability: str) -> tuple[str, ...]:
        """Devices offering ``capability``, in matrix order (for skip reasons)."""
        return tuple(name for name, device in self.devices.items() if capability in device.capabilities)

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(c for device in self.devices.values() for c in device.capabilities)


# --- typed field readers -------------------------------------------------------------------------

# --- the matrix ----------------------------------------------------------------------------------


def default_requirement() -> str:
    """The harness release being generated, with what its suites run with."""
    from spec_decode_ci import __version__

    return f"spec-decode-ci[suites]=={__version__}"


def parse_matrix(doc: Document) -> Matrix:
    """Turn a located document into a ``Matrix``, or raise a located ``InputError``."""
    top = Section(doc, "", "the hardware matrix",
                  ("harness", "test_area", "buildkite", "devices", "vllm_sources", "steps", "suites"), renamed=RENAMED)
    test_area = top.get("test_area", section("test-area settings"), required=True)
    group = test_area.get("group", text)
    depends_on = test_area.get("depends_on", text_list())
    test_area.finish()
    harness = top.get("harness", section("the harness package"))
    harness_requirement = (harness.get("requirement", requirement) if harness else None) or default_requirement()
    nightly_index = harness.get("vllm_nightly_index", patterned(URL_RE, "an https:// package index URL")) \
        if harness else None
    if harness:
        harness.finish()
    buildkite = top.get("buildkite", section("native Buildkite settings"))
    setup_commands, junit_dir = (), "junit"
    if buildkite:
        setup_commands = buildkite.get("setup_commands", text_list(unique=False), default=())
        junit_dir = buildkite.get("junit_dir", text, default="junit")
        buildkite.finish()

    devices_reader = top.get("devices", section("devices by name"), required=True)
    devices = {name: _parse_device(doc, join("devices", name), name) for name in devices_reader.data}

    sources = top.get("vllm_sources", vllm_source_sets, default={})
    steps = top.get("steps", _steps(devices), default=())

    suites_reader = top.get("suites", section("suites by name"))
    suites = {}
    if suites_reader:
        suites = {name: _parse_suite(doc, join("suites", name), name, devices, sources)
                  for name in suites_reader.data}
    if not steps and not suites:
        raise doc.error("", "expected at least one entry under `steps` or `suites`")
    nightly = [name for name, s in suites.items() if VLLM_NIGHTLY in s.vllm]
    if nightly and not nightly_index:
        raise doc.error("harness", f"expected harness.vllm_nightly_index (suite '{nightly[0]}' installs vLLM's "
                                   f"nightly wheel)")
    top.finish()
    return Matrix(group, depends_on, harness_requirement, setup_commands, junit_dir, devices, steps, suites, nightly_index,
                  sources)


DEVICE_KEYS = ("test_area_device", "display_name", "emoji", "gpu_name", "memory_gib", "compute_capability",
               "sm_count", "gpus_per_agent", "capabilities", "depends_on", "spec_decode_cuda_graphs")
CUDA_GRAPH_MODES = ("NONE", "PIECEWISE", "FULL")  # vLLM's CUDAGraphMode runtime modes, least first
BACKEND_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def cuda_graph_floors(doc: Document, path: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``spec_decode_cuda_graphs``: {vLLM attention backend name: a runtime mode of CUDA_GRAPH_MODES}."""
    if not isinstance(value, dict) or not value:
        raise doc.error(path, "expected a mapping of attention backend (e.g. FLASHINFER) to a CUDA-graph mode "
                              f"({', '.join(CUDA_GRAPH_MODES)})")
    mode = one_of(CUDA_GRAPH_MODES)
    return tuple((text(doc, join(path, backend), backend, pattern=BACKEND_NAME_RE,
                       hint="a vLLM attention backend name such as FLASHINFER"), mode(doc, join(path, backend), m))
                 for backend, m in value.items())


def _parse_device(doc: Document, path: str, name: str) -> Device:
    text(doc, path, name, pattern=DEVICE_NAME_RE, hint="a device name of lower-case letters, digits, '_' and '-'")
    r = Section(doc, path, f"device '{name}'", DEVICE_KEYS, renamed=RENAMED)
    return Device(
        name=name,
        test_area_device=r.get("test_area_device", text, required=True),
        display_name=r.get("display_name", text),
        emoji=r.get("emoji", text),
        gpu_name=r.get("gpu_name", text),
        memory_gib=r.get("memory_gib", integer(1)),
        compute_capability=r.get(
            "compute_capability", patterned(COMPUTE_CAPABILITY_RE, "a 'major.minor' string such as '10.0'"), None
        ),
        gpus_per_agent=r.get("gpus_per_agent", integer(0)),
        capabilities=r.get(
            "capabilities", text_list(patterned(CAPABILITY_RE, "a capability name such as 'trtllm_prefill'")), ()
        ),
        depends_on=r.get("depends_on", text_list()),
        sm_count=r.get("sm_count", integer(1)),
        spec_decode_cuda_graphs=r.get("spec_decode_cuda_graphs", cuda_graph_floors, ()),
    )


COMPAT_LANE, VLLM_NIGHTLY = "compat_lane", "nightly"
URL_RE = re.compile(r"^https://\S+$")


def vllm_releases(doc: Document, path: str, value: Any) -> tuple[str, ...]:
    """A release, a list of releases, ``compat_lane`` (every release ``spec_decode_ci.compat`` names) or
    ``nightly`` (vLLM's nightly wheel, from ``harness.vllm_nightly_index``)."""
    if value == COMPAT_LANE:
        from spec_decode_ci.compat import compat_lane_releases

        return compat_lane_releases()
    if value == VLLM_NIGHTLY:
        return (VLLM_NIGHTLY,)
    release = patterned(VERSION_RE, f"a vLLM release such as '0.20.0', a list of them, '{COMPAT_LANE}' or "
                                    f"'{VLLM_NIGHTLY}'")
    return (release(doc, path, value),) if not isinstance(value, list) else text_list(release, non_empty=True)(
        doc, path, value)


VLLM_PATH_RE = re.compile(r"^vllm/[A-Za-z0-9_./\-]*[A-Za-z0-9_/]$")


def vllm_source_sets(doc: Document, path: str, value: Any) -> dict[str, tuple[str, ...]]:
    """``vllm_sources``: named lists of paths in vLLM's package (``vllm/...``; a folder ends in ``/``)."""
    sets = Section(doc, path, "named sets of vLLM source paths").data
    paths = text_list(patterned(VLLM_PATH_RE, "a path in vLLM's package, 'vllm/...' (a folder ends in '/')"),
                      non_empty=True)
    for name in sets:
        text(doc, join(path, name), name, pattern=NAME_RE, hint="a set name of lower-case letters, digits and '_'")
    return {name: paths(doc, join(path, name), listed) for name, listed in sets.items()}


SUITE_KEYS = ("key", "label", "devices", "schedule", "optional", "soft_fail", "timeout_in_minutes", "num_devices",
              "vllm_sources", "source_file_dependencies", "tests", "markers", "env", "pipelines", "vllm", "needs", "workers")


def _parse_suite(doc: Document, path: str, name: str, devices: dict[str, Device],
                 sources: dict[str, tuple[str, ...]]) -> Suite:
    text(doc, path, name, pattern=NAME_RE, hint="a suite name of lower-case letters, digits and '_'")
    r = Section(doc, path, f"suite '{name}'", SUITE_KEYS, renamed=RENAMED)
    named = r.get("vllm_sources", text_list(one_of(tuple(sources)), non_empty=True), ())
    own = r.get("source_file_dependencies", text_list(non_empty=True), ())
    if not named and not own:
        raise doc.error(path, f"suite '{name}' expected `vllm_sources` (sets named under the top-level "
                              f"vllm_sources) or `source_file_dependencies`: the files whose change runs it")
    suite = Suite(
        name=name,
        key=r.get("key", patterned(STEP_KEY_RE, "a step key of lower-case letters, digits and '-'"), required=True),
        label=r.get("label", text, required=True),
        devices=r.get("devices", text_list(device_ref(devices), non_empty=True), required=True),
        schedule=r.get("schedule", one_of(SCHEDULES), required=True),
        optional=r.get("optional", boolean, False),
        soft_fail=r.get("soft_fail", boolean, False),
        timeout_in_minutes=r.get("timeout_in_minutes", integer(1, 24 * 60), required=True),
        num_devices=r.get("num_devices", integer(1), 1),
        source_file_dependencies=tuple(dict.fromkeys((*(p for n in named for p in sources[n]), *own))),
        tests=r.get("tests", text_list(patterned(MODULE_RE, "an importable test package or module such as "
                                                           "'spec_decode_ci.suites.e2e'"), non_empty=True),
                    required=True),
        markers=r.get("markers", text, None),
        env=r.get("env", env_mapping, ()),
        pipelines=r.get("pipelines", text_list(one_of(PIPELINES), non_empty=True), PIPELINES),
        vllm=r.get("vllm", vllm_releases, ()),
        needs=r.get("needs", text_list(one_of(NEEDS)), ()),
        workers=r.get("workers", integer(1, 64), 1),
    )
    if suite.schedule == "nightly" and not suite.optional:
        raise doc.error(join(path, "optional"), "a nightly suite must be optional: true (ci-infra gates it)")
    for device_name in suite.devices:
        device = devices[device_name]
        image = image_for(device.test_area_device)
        lacking = [need for need in suite.needs if need not in image.provides]
        if lacking:
            fits = sorted((n for n, d in devices.items() if set(suite.needs) <= image_for(d.test_area_device).provides
                           and d.display_name and d.emoji),  # the smallest agents first
                          key=lambda n: (devices[n].gpus_per_agent or 0, devices[n].memory_gib or 1 << 20, n))
            raise doc.error(join(path, "devices"),
                            f"device '{device_name}' runs in {image.name}, which lacks {', '.join(lacking)} that "
                            f"suite '{name}' needs; expected a device whose image has it"
                            + (f" (e.g. {', '.join(fits[:3])})" if fits else ""))
        for needed in ("display_name", "emoji"):
            if getattr(device, needed) is None:
                raise doc.error(join(path, "devices"),
                                f"device '{device_name}' needs `{needed}` to label suite steps")
        available = device.gpus_per_agent
        if available and suite.num_devices > available:
            raise doc.error(
                join(path, "num_devices"),
                f"expected at most {available} (GPUs per {device_name} agent), got {suite.num_devices}",
            )
    return suite


@lru_cache(maxsize=4)
def load_matrix(path: Path) -> Matrix:
    """The hardware matrix at ``path``, parsed (the one way the harness reads it)."""
    return parse_matrix(read_document(path))
