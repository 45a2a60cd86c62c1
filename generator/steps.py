"""ci-infra's test-area step schema, key for key: the keys a step and its AMD mirror may hold, their types and
ci-infra's own validators, reported where they apply (ci-infra would drop an unknown key silently)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spec_decode_ci.generator.load import Document, join
from spec_decode_ci.generator.readers import (
    Parse, Section, _kind, boolean, closest, env_mapping, integer, patterned, plain_mapping, string_mapping, text,
    text_list,
)

if TYPE_CHECKING:
    from spec_decode_ci.generator.model import Device

# keys written in an older or other spelling -> ci-infra's: named first when an unknown key is one
RENAMED = {"num_gpus": "num_devices", "gpu": "device", "timeout": "timeout_in_minutes", "command": "commands"}


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
    section = Section(doc, path, what, tuple(fields), renamed=RENAMED)
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
