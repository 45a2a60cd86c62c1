"""Stage 2, model: the hardware matrix as plain dataclasses, parsed from a located ``Document``.

Every key is declared here; an unknown key is an error (ci-infra would drop it silently), and every
type error names the key's position in the file and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from generator.load import Document, join

SCHEDULES = ("nightly", "every_change")
CAPABILITY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
STEP_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9\-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
COMPUTE_CAPABILITY_RE = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True)
class Device:
    """A kind of CI agent: where a step runs and what its hardware can do."""

    name: str
    display_name: str  # shown in labels: "(B200)"
    emoji: str  # Buildkite emoji prefix of the label
    test_area_device: str  # the `device:` string of vLLM test-area files
    queue: str  # the Buildkite agent queue of the native pipeline
    arch: str
    compute_capability: str | None
    gpus_per_agent: int
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    """A pytest suite and the CI steps that run it, one per device."""

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
    tests: tuple[str, ...]
    markers: str | None
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Matrix:
    group: str
    depends_on: tuple[str, ...]
    working_dir: str | None
    setup_commands: tuple[str, ...]
    junit_dir: str
    devices: dict[str, Device]
    suites: dict[str, Suite]

    def devices_with(self, capability: str) -> tuple[str, ...]:
        """Devices offering ``capability``, in matrix order (for skip reasons)."""
        return tuple(name for name, device in self.devices.items() if capability in device.capabilities)

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(c for device in self.devices.values() for c in device.capabilities)


# --- typed field readers -------------------------------------------------------------------------

_FORBIDDEN_CHAR = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")


class Section:
    """Reads one mapping of a document, remembering which keys were consumed."""

    def __init__(self, doc: Document, path: str, what: str):
        self.doc, self.path = doc, path
        data = _lookup(doc.data, path)
        if not isinstance(data, dict):
            raise doc.error(path, f"expected a mapping ({what}), got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.allowed: list[str] = []

    def get(self, key: str, parse: Callable[[Document, str, Any], Any], default: Any = None, required: bool = False):
        self.allowed.append(key)
        if key not in self.data:
            if required:
                raise self.doc.error(self.path, f"missing required key '{key}'")
            return default
        return parse(self.doc, join(self.path, key), self.data[key])

    def finish(self) -> None:
        for key in self.data:
            if key not in self.allowed:
                raise self.doc.error(
                    join(self.path, key), f"unknown key '{key}' (expected one of: {', '.join(self.allowed)})"
                )


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


def patterned(pattern: re.Pattern[str], hint: str) -> Callable[[Document, str, Any], str]:
    return lambda doc, path, value: text(doc, path, value, pattern=pattern, hint=hint)


def integer(minimum: int, maximum: int | None = None) -> Callable[[Document, str, Any], int]:
    def parse(doc: Document, path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
            maximum is not None and value > maximum
        ):
            bound = f"≥ {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise doc.error(path, f"expected an integer {bound}, got {value!r} ({_kind(value)})")
        return value

    return parse


def boolean(doc: Document, path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {value!r} ({_kind(value)})")
    return value


def one_of(choices: tuple[str, ...]) -> Callable[[Document, str, Any], str]:
    def parse(doc: Document, path: str, value: Any) -> str:
        if value not in choices:
            raise doc.error(path, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def text_list(item: Callable[[Document, str, Any], str] = text, *, non_empty: bool = False, unique: bool = True):
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


# --- the matrix ----------------------------------------------------------------------------------


def _section(what: str) -> Callable[[Document, str, Any], Section]:
    return lambda doc, path, value: Section(doc, path, what)


def parse_matrix(doc: Document) -> Matrix:
    """Turn a located document into a ``Matrix``, or raise a located ``InputError``."""
    top = Section(doc, "", "the hardware matrix")
    test_area = top.get("test_area", _section("test-area settings"), required=True)
    group = test_area.get("group", text, required=True)
    depends_on = test_area.get("depends_on", text_list(), default=())
    working_dir = test_area.get("working_dir", text)
    test_area.finish()
    buildkite = top.get("buildkite", _section("native Buildkite settings"), required=True)
    setup_commands = buildkite.get("setup_commands", text_list(unique=False), default=())
    junit_dir = buildkite.get("junit_dir", text, default="junit")
    buildkite.finish()

    devices_reader = top.get("devices", _section("devices by name"), required=True)
    devices = {name: _parse_device(doc, join("devices", name), name) for name in devices_reader.data}
    if not devices:
        raise doc.error("devices", "expected at least one device")
    suites_reader = top.get("suites", _section("suites by name"), required=True)
    suites = {name: _parse_suite(doc, join("suites", name), name, devices) for name in suites_reader.data}
    if not suites:
        raise doc.error("suites", "expected at least one suite")
    top.finish()
    return Matrix(group, depends_on, working_dir, setup_commands, junit_dir, devices, suites)


def _parse_device(doc: Document, path: str, name: str) -> Device:
    text(doc, path, name, pattern=NAME_RE, hint="a device name of lower-case letters, digits and '_'")
    r = Section(doc, path, f"device '{name}'")
    device = Device(
        name=name,
        display_name=r.get("display_name", text, required=True),
        emoji=r.get("emoji", text, required=True),
        test_area_device=r.get("test_area_device", text, required=True),
        queue=r.get("queue", text, required=True),
        arch=r.get("arch", text, required=True),
        compute_capability=r.get(
            "compute_capability", patterned(COMPUTE_CAPABILITY_RE, "a 'major.minor' string such as '10.0'"), None
        ),
        gpus_per_agent=r.get("gpus_per_agent", integer(0), required=True),
        capabilities=r.get(
            "capabilities", text_list(patterned(CAPABILITY_RE, "a capability name such as 'trtllm_prefill'")), ()
        ),
    )
    r.finish()
    return device


def _parse_suite(doc: Document, path: str, name: str, devices: dict[str, Device]) -> Suite:
    text(doc, path, name, pattern=NAME_RE, hint="a suite name of lower-case letters, digits and '_'")
    r = Section(doc, path, f"suite '{name}'")

    def device_name(d: Document, p: str, value: Any) -> str:
        if not isinstance(value, str) or value not in devices:
            raise d.error(p, f"unknown device {value!r} (expected one of: {', '.join(devices)})")
        return value

    suite = Suite(
        name=name,
        key=r.get("key", patterned(STEP_KEY_RE, "a step key of lower-case letters, digits and '-'"), required=True),
        label=r.get("label", text, required=True),
        devices=r.get("devices", text_list(device_name, non_empty=True), required=True),
        schedule=r.get("schedule", one_of(SCHEDULES), required=True),
        optional=r.get("optional", boolean, False),
        soft_fail=r.get("soft_fail", boolean, False),
        timeout_in_minutes=r.get("timeout_in_minutes", integer(1, 24 * 60), required=True),
        num_devices=r.get("num_devices", integer(1), 1),
        source_file_dependencies=r.get("source_file_dependencies", text_list(non_empty=True), required=True),
        tests=r.get("tests", text_list(non_empty=True), required=True),
        markers=r.get("markers", text, None),
        env=r.get("env", env_mapping, ()),
    )
    r.finish()
    if suite.schedule == "nightly" and not suite.optional:
        raise doc.error(join(path, "optional"), "a nightly suite must be optional: true (ci-infra gates it)")
    for device in suite.devices:
        available = devices[device].gpus_per_agent
        if available and suite.num_devices > available:
            raise doc.error(
                join(path, "num_devices"),
                f"expected at most {available} (GPUs per {device} agent), got {suite.num_devices}",
            )
    return suite
