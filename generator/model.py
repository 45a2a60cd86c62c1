"""Stage 2, model: the hardware matrix as plain dataclasses, parsed from a located ``Document``.

Every key is declared here; an unknown key is an error naming its line and the closest valid key
(ci-infra would drop it silently), and every type error names the key's position and what was expected.

The matrix has three kinds of entries:
- ``devices``: one block per kind of agent (test-area device string, capabilities, how to recognise it);
- ``steps``: test-area steps written exactly as ci-infra reads them (vLLM's own spec-decode steps);
- ``suites``: the harness's pytest suites, expanded into one step per device.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable

from spec_decode_ci.generator.load import Document, join
from spec_decode_ci.generator.routing import NEEDS, image_for

SCHEDULES = ("nightly", "every_change")
PIPELINES = ("test-area", "buildkite")
CAPABILITY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
DEVICE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
STEP_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9\-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


@dataclass(frozen=True)
class AreaStep:
    """A test-area step as ci-infra reads it; ``fields`` keeps the keys in the order they were written.
    ``device`` values (the step's and its mirrors') name matrix devices."""

    fields: tuple[tuple[str, Any], ...]
    index: int  # position in the matrix's `steps` list, for located errors

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.fields).get(key, default)

    @property
    def key(self) -> str | None:
        return self.get("key")

    @property
    def label(self) -> str:
        return self.get("label")


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
    harness_requirement: str | None
    setup_commands: tuple[str, ...]
    junit_dir: str
    devices: dict[str, Device]
    steps: tuple[AreaStep, ...]
    suites: dict[str, Suite]
    vllm_nightly_index: str | None = None  # the package index of vLLM's nightly wheels (suites with vllm: nightly)

    def devices_with(self, capability: str) -> tuple[str, ...]:
        """Devices offering ``capability``, in matrix order (for skip reasons)."""
        return tuple(name for name, device in self.devices.items() if capability in device.capabilities)

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(c for device in self.devices.values() for c in device.capabilities)


# --- typed field readers -------------------------------------------------------------------------

_FORBIDDEN_CHAR = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")
Parse = Callable[[Document, str, Any], Any]


def closest(word: str, candidates) -> str | None:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return match[0] if match else None


# Keys of older test-area files (and of other CI systems) and what ci-infra reads instead.
RENAMED = {"num_gpus": "num_devices", "gpu": "device", "timeout": "timeout_in_minutes", "command": "commands"}


class Section:
    """Reads one mapping of a document against a declared set of keys."""

    def __init__(self, doc: Document, path: str, what: str, keys: tuple[str, ...] = ()):
        self.doc, self.path, self.what = doc, path, what
        data = _lookup(doc.data, path)
        if not isinstance(data, dict):
            raise doc.error(path, f"expected a mapping ({what}), got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.allowed: list[str] = list(keys)
        if keys:
            self.finish()

    def get(self, key: str, parse: Parse, default: Any = None, required: bool = False):
        if key not in self.allowed:
            self.allowed.append(key)
        if key not in self.data or (self.data[key] is None and not required):
            if required:
                self._unknown_keys(missing=key)
                raise self.doc.error(self.path, f"missing required key '{key}' in {self.what}")
            return default
        return parse(self.doc, join(self.path, key), self.data[key])

    def _unknown_keys(self, missing: str | None = None) -> None:
        """Raise at the first key that is not declared, naming the closest declared key."""
        for key in self.data:
            if key in self.allowed:
                continue
            candidates = [missing] if missing else self.allowed
            guess = RENAMED.get(key) if RENAMED.get(key) in candidates else closest(key, candidates)
            if missing and guess is None:
                continue
            hint = f"did you mean '{guess}'?" if guess else f"expected one of: {', '.join(self.allowed)}"
            raise self.doc.error(join(self.path, key), f"unknown key '{key}' in {self.what} ({hint})")

    def finish(self) -> None:
        self._unknown_keys()


def _lookup(data: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}.get(
        type(value), f"a {type(value).__name__}"
    )


def text(doc: Document, path: str, value: Any, *, pattern: re.Pattern[str] | None = None, hint: str = "") -> str:
    if not isinstance(value, str) or not value.strip():
        raise doc.error(path, f"expected a non-empty string{hint and ' ' + hint}, got {_kind(value)}")
    bad = _FORBIDDEN_CHAR.search(value)
    if bad:
        import unicodedata  # error path only

        name = unicodedata.name(bad.group(), f"U+{ord(bad.group()):04X}")
        raise doc.error(path, f"expected printable text, found control character {name}")
    if pattern is not None and not pattern.match(value):
        raise doc.error(path, f"expected {hint or 'a value matching ' + pattern.pattern}, got {value!r}")
    return value


def patterned(pattern: re.Pattern[str], hint: str) -> Parse:
    return lambda doc, path, value: text(doc, path, value, pattern=pattern, hint=hint)


def integer(minimum: int, maximum: int | None = None) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
            maximum is not None and value > maximum
        ):
            bound = f"≥ {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise doc.error(path, f"expected an integer {bound}, got {value!r} ({_kind(value)})")
        return value

    return parse


def number(minimum: float, maximum: float | None = None) -> Parse:
    """An integer or decimal number in [minimum, maximum] (a boolean is not a number)."""
    def parse(doc: Document, path: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum or (
            maximum is not None and value > maximum
        ):
            bound = f"≥ {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise doc.error(path, f"expected a number {bound}, got {value!r} ({_kind(value)})")
        return float(value)

    return parse


def boolean(doc: Document, path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {value!r} ({_kind(value)})")
    return value


def one_of(choices: tuple[str, ...]) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> str:
        if value not in choices:
            raise doc.error(path, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def text_list(item: Parse = text, *, non_empty: bool = False, unique: bool = True) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or (non_empty and not value):
            raise doc.error(path, f"expected a {'non-empty ' if non_empty else ''}list of strings, got {_kind(value)}")
        items = tuple(item(doc, join(path, i), v) for i, v in enumerate(value))
        for i, v in enumerate(items):
            if unique and v in items[:i]:
                raise doc.error(join(path, i), f"duplicate entry {v!r}")
        return items

    return parse


def env_mapping(doc: Document, path: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping of environment variables, got {_kind(value)}")
    out = []
    for name, setting in value.items():
        text(doc, join(path, name), name, pattern=ENV_NAME_RE, hint="an environment variable name")
        if isinstance(setting, bool) or not isinstance(setting, (str, int)):
            raise doc.error(join(path, name), f"expected a string or integer value, got {_kind(setting)}")
        out.append((name, text(doc, join(path, name), str(setting))))
    return tuple(out)


def string_mapping(doc: Document, path: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping of strings, got {_kind(value)}")
    return tuple((k, text(doc, join(path, k), v)) for k, v in value.items())


def plain_mapping(doc: Document, path: str, value: Any) -> dict[str, Any]:
    """A mapping passed through as written (Buildkite's `retry`, whose schema Buildkite checks)."""
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping, got {_kind(value)}")
    return value


def section(what: str) -> Parse:
    return lambda doc, path, value: Section(doc, path, what)


# --- test-area steps (ci-infra's step model, key for key) -----------------------------------------

BUILDKITE_KEY_RE = re.compile(r"^[a-zA-Z0-9_\-:${}.,]+$")


def _device_ref(devices: dict[str, Device]) -> Parse:
    """A device block's name, or its test-area device string (so vLLM's steps can be pasted as they are)."""

    def parse(doc: Document, path: str, value: Any) -> str:
        if isinstance(value, str) and value in devices:
            return value
        by_string = [d.name for d in devices.values() if d.test_area_device == value]
        if len(by_string) == 1:
            return by_string[0]
        if len(by_string) > 1:
            raise doc.error(path, f"device {value!r} is ambiguous: devices {', '.join(by_string)} all have that "
                                  "test_area_device; name one of them")
        guess = closest(str(value), devices)
        hint = f"did you mean '{guess}'?" if guess else f"expected one of: {', '.join(devices)}"
        raise doc.error(path, f"unknown device {value!r}: add a block under `devices` ({hint})")

    return parse


def _common_fields(devices: dict[str, Device]) -> dict[str, Parse]:
    """The keys a step and its mirror share, with ci-infra's types."""
    listed = text_list(unique=False)
    return {
        "label": text,
        "device": _device_ref(devices),
        "num_devices": integer(1),
        "num_nodes": integer(1),
        "working_dir": text,
        "timeout_in_minutes": integer(1),
        "optional": boolean,
        "soft_fail": boolean,
        "parallelism": integer(1),
        "concurrency": integer(1),
        "concurrency_group": text,
        "agent_tags": string_mapping,
        "no_plugin": boolean,
        "no_gpu": boolean,
        "dind": boolean,
        "env": env_mapping,
        "depends_on": listed,
        "source_file_dependencies": listed,
        "commands": listed,
    }


def step_fields(devices: dict[str, Device]) -> dict[str, Parse]:
    fields = _common_fields(devices)
    fields.update({
        "key": patterned(BUILDKITE_KEY_RE, "a Buildkite step key"),
        "group": text,
        "mount_buildkite_agent": boolean,
        "retry": plain_mapping,
        "mirror": _mirror(devices),
    })
    return fields


def mirror_fields(devices: dict[str, Device]) -> dict[str, Parse]:
    # `parallelism` is accepted because vLLM writes it; ci-infra gives a mirror its parent's parallelism.
    return {**_common_fields(devices), "num_gpus": integer(1)}


MIRROR_VENDORS = ("amd",)


def _mirror(devices: dict[str, Device]) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> tuple[tuple[str, Any], ...]:
        vendors = Section(doc, path, "a step's mirrors by vendor", MIRROR_VENDORS)
        return tuple(
            (vendor, _read_fields(doc, join(path, vendor), f"the {vendor} mirror", mirror_fields(devices),
                                  required=("device",)))
            for vendor in vendors.data
        )

    return parse


def _read_fields(doc: Document, path: str, what: str, fields: dict[str, Parse],
                 required: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """The keys of one mapping in the order written, each parsed by its declared reader; nulls are absent."""
    section = Section(doc, path, what, tuple(fields))
    for key in required:
        section.get(key, fields[key], required=True)
    return tuple((key, fields[key](doc, join(path, key), value))
                 for key, value in section.data.items() if value is not None)


def _check_step_rules(doc: Document, path: str, fields: dict[str, Any]) -> None:
    """ci-infra's own validators, reported where they apply instead of failing its pipeline upload."""
    if "num_nodes" in fields and "num_devices" not in fields:
        raise doc.error(join(path, "num_nodes"), "expected num_devices beside num_nodes (ci-infra requires it)")
    if ("concurrency" in fields) != ("concurrency_group" in fields):
        present = "concurrency" if "concurrency" in fields else "concurrency_group"
        raise doc.error(join(path, present), "expected concurrency and concurrency_group together")


def parse_step(doc: Document, path: str, index: int, devices: dict[str, Device]) -> AreaStep:
    fields = _read_fields(doc, path, f"step {index + 1}", step_fields(devices), required=("label",))
    _check_step_rules(doc, path, dict(fields))
    return AreaStep(fields, index)


def _steps(devices: dict[str, Device]) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> tuple[AreaStep, ...]:
        if not isinstance(value, list):
            raise doc.error(path, f"expected a list of test-area steps, got {_kind(value)}")
        return tuple(parse_step(doc, join(path, i), i, devices) for i in range(len(value)))

    return parse


# --- the matrix ----------------------------------------------------------------------------------


def parse_matrix(doc: Document) -> Matrix:
    """Turn a located document into a ``Matrix``, or raise a located ``InputError``."""
    top = Section(doc, "", "the hardware matrix", ("harness", "test_area", "buildkite", "devices", "steps", "suites"))
    test_area = top.get("test_area", section("test-area settings"), required=True)
    group = test_area.get("group", text)
    depends_on = test_area.get("depends_on", text_list())
    test_area.finish()
    harness = top.get("harness", section("the harness package"))
    requirement = harness.get("requirement", text) if harness else None
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

    steps = top.get("steps", _steps(devices), default=())

    suites_reader = top.get("suites", section("suites by name"))
    suites = {}
    if suites_reader:
        suites = {name: _parse_suite(doc, join("suites", name), name, devices) for name in suites_reader.data}
    if suites and not requirement and any("test-area" in s.pipelines for s in suites.values()):
        raise doc.error("harness", "expected harness.requirement (the pinned package the suite steps install)")
    if not steps and not suites:
        raise doc.error("", "expected at least one entry under `steps` or `suites`")
    nightly = [name for name, s in suites.items() if VLLM_NIGHTLY in s.vllm]
    if nightly and not nightly_index:
        raise doc.error("harness", f"expected harness.vllm_nightly_index (suite '{nightly[0]}' installs vLLM's "
                                   f"nightly wheel)")
    top.finish()
    return Matrix(group, depends_on, requirement, setup_commands, junit_dir, devices, steps, suites, nightly_index)


DEVICE_KEYS = ("test_area_device", "display_name", "emoji", "gpu_name", "memory_gib", "compute_capability",
               "gpus_per_agent", "capabilities", "depends_on")


def _parse_device(doc: Document, path: str, name: str) -> Device:
    text(doc, path, name, pattern=DEVICE_NAME_RE, hint="a device name of lower-case letters, digits, '_' and '-'")
    r = Section(doc, path, f"device '{name}'", DEVICE_KEYS)
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


SUITE_KEYS = ("key", "label", "devices", "schedule", "optional", "soft_fail", "timeout_in_minutes", "num_devices",
              "source_file_dependencies", "tests", "markers", "env", "pipelines", "vllm", "needs", "workers")


def _parse_suite(doc: Document, path: str, name: str, devices: dict[str, Device]) -> Suite:
    text(doc, path, name, pattern=NAME_RE, hint="a suite name of lower-case letters, digits and '_'")
    r = Section(doc, path, f"suite '{name}'", SUITE_KEYS)
    suite = Suite(
        name=name,
        key=r.get("key", patterned(STEP_KEY_RE, "a step key of lower-case letters, digits and '-'"), required=True),
        label=r.get("label", text, required=True),
        devices=r.get("devices", text_list(_device_ref(devices), non_empty=True), required=True),
        schedule=r.get("schedule", one_of(SCHEDULES), required=True),
        optional=r.get("optional", boolean, False),
        soft_fail=r.get("soft_fail", boolean, False),
        timeout_in_minutes=r.get("timeout_in_minutes", integer(1, 24 * 60), required=True),
        num_devices=r.get("num_devices", integer(1), 1),
        source_file_dependencies=r.get("source_file_dependencies", text_list(non_empty=True), required=True),
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
