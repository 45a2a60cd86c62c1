"""Stage 5, validate: the rendered text must parse back to exactly the dict model, in a shape its consumer reads.

Runs on every generation, before anything is written. The official Buildkite JSON schema check lives in
the test suite (it needs jsonschema, too slow to import on every `--check`).
"""

from __future__ import annotations

from typing import Any

import yaml

from spec_decode_ci.generator import ci_infra_keys
from spec_decode_ci.generator.errors import InputError

# The keys ci-infra reads on a step and in its AMD mirror (ci_infra_keys); anything else it drops without a word.
CI_INFRA_STEP_KEYS = frozenset(ci_infra_keys.names(ci_infra_keys.STEP))
CI_INFRA_MIRROR_KEYS = frozenset(ci_infra_keys.names(ci_infra_keys.MIRROR))
TEST_AREA_TOP_KEYS = frozenset({"group", "depends_on", "steps"})


def check_round_trip(text: str, expected: dict[str, Any], file: str) -> None:
    """The YAML text must load (safely) to the dict model; otherwise name the first step that differs."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        parsed = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise InputError(file, f"rendered output is not valid YAML ({exc}); a template is broken") from None
    if parsed == expected:
        return
    for i, (got, want) in enumerate(zip(parsed.get("steps", []) if isinstance(parsed, dict) else [],
                                        expected["steps"])):
        if got != want:
            raise InputError(file, f"rendered step {want.get('key')!r} does not match its model: "
                                   f"got {got!r}, expected {want!r}", path=f"steps.{i}")
    raise InputError(file, "rendered output does not match its model outside the steps")


def check_test_area_keys(expected: dict[str, Any], file: str) -> None:
    extra = set(expected) - TEST_AREA_TOP_KEYS
    if extra:
        raise InputError(file, f"test-area files hold only {sorted(TEST_AREA_TOP_KEYS)}, got {sorted(extra)}")
    for i, step in enumerate(expected["steps"]):
        unknown = set(step) - CI_INFRA_STEP_KEYS
        if unknown:
            raise InputError(file, f"keys ci-infra would drop silently: {sorted(unknown)}", path=f"steps.{i}")
        for vendor, mirror in (step.get("mirror") or {}).items():
            unknown = set(mirror) - CI_INFRA_MIRROR_KEYS
            if vendor != "amd" or unknown:
                raise InputError(file, f"mirror keys ci-infra would drop silently: {vendor} {sorted(unknown)}",
                                 path=f"steps.{i}.mirror")
