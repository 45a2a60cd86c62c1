"""`generate-pipeline import`: a vLLM test-area file -> a hardware matrix that regenerates it.

Every step is read with the matrix's own step readers, so a key ci-infra does not read (and would drop) is an
error that names it; every device string becomes a device block of the same name.
"""

from __future__ import annotations

from typing import Any

from spec_decode_ci.generator.load import Document, join
from spec_decode_ci.generator.model import Device
from spec_decode_ci.generator.readers import Section, text, text_list
from spec_decode_ci.generator.steps import RENAMED, AreaStep, parse_step
from spec_decode_ci.generator.render import plain_fields, yaml_value

TOP_KEYS = ("group", "depends_on", "steps")


def _device_strings(doc: Document) -> list[str]:
    """Each `device:` string of the file's steps and mirrors, in order of first appearance."""
    found: list[str] = []
    for i, step in enumerate(doc.data.get("steps") or []):
        if not isinstance(step, dict):
            raise doc.error(join("steps", i), "expected a mapping (a test-area step)")
        bodies = [("", step)]
        mirror = step.get("mirror")
        if isinstance(mirror, dict):
            bodies += [(f"mirror.{vendor}", body) for vendor, body in mirror.items() if isinstance(body, dict)]
        for where, body in bodies:
            device = body.get("device")
            if device is None:
                continue
            path = join(join(join("steps", i), where) if where else join("steps", i), "device")
            text(doc, path, device)
            if device not in found:
                found.append(device)
    return found


def area_file_steps(doc: Document) -> tuple[str | None, tuple[str, ...] | None, list[AreaStep]]:
    """A test-area file's group, depends_on and steps, each step read as ci-infra reads it (a device block per
    device string); raises a located ``InputError`` on a key ci-infra would drop."""
    top = Section(doc, "", "a test-area file", TOP_KEYS, renamed=RENAMED)
    group = top.get("group", text)
    depends_on = top.get("depends_on", text_list())
    raw_steps = top.get("steps", lambda d, p, v: v, required=True)
    if not isinstance(raw_steps, list):
        raise doc.error("steps", "expected a list of steps")
    devices = {name: Device(name, name, None, None, None, None, None, None, (), None) for name in _device_strings(doc)}
    return group, depends_on, [parse_step(doc, join("steps", i), i, devices) for i in range(len(raw_steps))]


def import_test_area(doc: Document) -> str:
    """The matrix text for the test-area file ``doc``; raises a located ``InputError`` on what it cannot carry."""
    group, depends_on, steps = area_file_steps(doc)
    devices = _device_strings(doc)
    test_area: dict[str, Any] = {}
    if group is not None:
        test_area["group"] = group
    if depends_on is not None:
        test_area["depends_on"] = list(depends_on)
    matrix = {
        "test_area": test_area,
        "devices": {name: {"test_area_device": name} for name in devices},
        "steps": [plain_fields(step.fields) for step in steps],
    }
    head = (f"# Imported by `generate-pipeline import` from {doc.file.rsplit('/', 1)[-1]}: every step as ci-infra\n"
            "# reads it, and a device block per device string. Regenerate the test-area file with\n"
            "# `generate-pipeline --matrix THIS_FILE --output PATH`.\n")
    return head + "".join(f"{key}:{yaml_value(value, 2)}\n" for key, value in matrix.items())
