"""ci-infra's test-area steps: a step and its AMD mirror read with the keys of ``ci_infra_keys`` (ci-infra would
drop an unknown key silently), and ci-infra's own validators, reported where they apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spec_decode_ci.generator import ci_infra_keys
from spec_decode_ci.generator.load import Document, join
from spec_decode_ci.generator.readers import Parse, Section, _kind, closest
from spec_decode_ci.generator.routing import KUBERNETES_DEVICES

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


def device_ref(devices: dict[str, Device]) -> Parse:
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


MIRROR_VENDORS = ("amd",)


def mirror_reader(devices: dict[str, Device]) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> tuple[tuple[str, Any], ...]:
        vendors = Section(doc, path, "a step's mirrors by vendor", MIRROR_VENDORS)
        return tuple(
            (vendor, _read_fields(doc, join(path, vendor), f"the {vendor} mirror",
                                  ci_infra_keys.fields(ci_infra_keys.MIRROR, devices), required=("device",)))
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


def _check_step_rules(doc: Document, path: str, fields: dict[str, Any], devices: dict[str, Device]) -> None:
    """ci-infra's own validators, reported where they apply instead of failing its pipeline upload."""
    if "num_nodes" in fields and "num_devices" not in fields:
        raise doc.error(join(path, "num_nodes"), "expected num_devices beside num_nodes (ci-infra requires it)")
    if ("concurrency" in fields) != ("concurrency_group" in fields):
        present = "concurrency" if "concurrency" in fields else "concurrency_group"
        raise doc.error(join(path, present), "expected concurrency and concurrency_group together")
    device = devices[fields["device"]].test_area_device if "device" in fields else None
    if fields.get("automatic_shard") and device in KUBERNETES_DEVICES:
        raise doc.error(join(path, "automatic_shard"),
                        f"ci-infra refuses automatic_shard on device {device!r}, which it runs through its Kubernetes "
                        f"plugin ({', '.join(KUBERNETES_DEVICES)}); expected a device of the docker plugin (e.g. "
                        f"h200_35gb) or automatic_shard left out")


def parse_step(doc: Document, path: str, index: int, devices: dict[str, Device]) -> AreaStep:
    fields = _read_fields(doc, path, f"step {index + 1}", ci_infra_keys.fields(ci_infra_keys.STEP, devices),
                          required=("label",))
    _check_step_rules(doc, path, dict(fields), devices)
    return AreaStep(fields, index)


def _steps(devices: dict[str, Device]) -> Parse:
    def parse(doc: Document, path: str, value: Any) -> tuple[AreaStep, ...]:
        if not isinstance(value, list):
            raise doc.error(path, f"expected a list of test-area steps, got {_kind(value)}")
        return tuple(parse_step(doc, join(path, i), i, devices) for i in range(len(value)))

    return parse
