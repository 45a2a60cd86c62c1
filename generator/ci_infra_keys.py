"""The one table of the test-area keys the generator accepts, each traced to where vllm-project/ci-infra reads it
and the ci-infra commit it was read from. ci-infra's step model drops any other key silently; the generator refuses
it. The next key ci-infra adds is one row here (and, where ci-infra refuses it somewhere, one rule in ``steps``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from spec_decode_ci.generator.readers import (
    Parse, boolean, env_mapping, integer, patterned, plain_mapping, string_mapping, text, text_list,
)

if TYPE_CHECKING:
    from spec_decode_ci.generator.model import Device

# vllm-project/ci-infra commits the rows were read from.
STEP_MODEL_COMMIT = "3e4cfe4bf1f2fb4af37124cd83b1c6ee6bf73284"  # main, 2026-08-21
RUNTIME_SHARD_COMMIT = "320eade60361f8e1e8eb409bf9007570713356d5"  # runtime_shard.py with `automatic_shard: true`
STEP_MODEL = "buildkite/pipeline_generator/step.py: class Step"
MIRROR_READER = "buildkite/pipeline_generator/buildkite_step.py: step.mirror['amd'].get(...)"
RUNTIME_SHARD = "buildkite/pipeline_generator/runtime_shard.py: steps enrolled with `automatic_shard: true`"
STEP, MIRROR = "step", "mirror"

Reader = Callable[[dict[str, "Device"]], Parse]


def _plain(parse: Parse) -> Reader:
    return lambda devices: parse


def _device(devices: dict[str, Device]) -> Parse:
    from spec_decode_ci.generator.steps import device_ref

    return device_ref(devices)


def _mirror(devices: dict[str, Device]) -> Parse:
    from spec_decode_ci.generator.steps import mirror_reader

    return mirror_reader(devices)


BUILDKITE_KEY_RE = re.compile(r"^[a-zA-Z0-9_\-:${}.,]+$")  # Buildkite's pipeline schema
BUILDKITE_KEY = patterned(BUILDKITE_KEY_RE, "a Buildkite step key")
_LISTED = text_list(unique=False)


@dataclass(frozen=True)
class CiInfraKey:
    """A test-area key: how the generator reads it, where it may stand (a step, its AMD mirror), and where
    ci-infra reads it at which commit."""

    name: str
    reader: Reader
    on: tuple[str, ...]
    read_in: str
    commit: str


def _row(name: str, parse: Parse | Reader, on: tuple[str, ...] = (STEP, MIRROR), read_in: str = "",
         commit: str = STEP_MODEL_COMMIT, by_device: bool = False) -> CiInfraKey:
    where = read_in or (STEP_MODEL if on == (STEP,) else f"{STEP_MODEL}; {MIRROR_READER}")
    return CiInfraKey(name, parse if by_device else _plain(parse), on, where, commit)


KEYS: tuple[CiInfraKey, ...] = (
    _row("label", text),
    _row("key", BUILDKITE_KEY, (STEP,)),
    _row("group", text, (STEP,)),
    _row("device", _device, by_device=True),
    _row("num_devices", integer(1)),
    _row("num_gpus", integer(1), (MIRROR,), MIRROR_READER),  # the mirror's older spelling, still read there
    _row("num_nodes", integer(1)),
    _row("working_dir", text),
    _row("timeout_in_minutes", integer(1)),
    _row("optional", boolean),
    _row("soft_fail", boolean),
    # vLLM writes `parallelism` in mirrors; ci-infra gives a mirror its parent's parallelism.
    _row("parallelism", integer(1)),
    _row("concurrency", integer(1)),
    _row("concurrency_group", text),
    _row("agent_tags", string_mapping),
    _row("no_plugin", boolean),
    _row("no_gpu", boolean),
    _row("dind", boolean),
    _row("env", env_mapping),
    _row("depends_on", _LISTED),
    _row("source_file_dependencies", _LISTED),
    _row("commands", _LISTED),
    _row("mount_buildkite_agent", boolean, (STEP,)),
    _row("retry", plain_mapping, (STEP,)),
    _row("mirror", _mirror, (STEP,), by_device=True),
    # Planned into shards from main's timings (at most 6; one job without timings); refused on Kubernetes devices
    # (steps._check_step_rules).
    _row("automatic_shard", boolean, (STEP,), RUNTIME_SHARD, RUNTIME_SHARD_COMMIT),
)


def names(on: str) -> tuple[str, ...]:
    """The keys that may stand on a step (``STEP``) or in its AMD mirror (``MIRROR``), in table order."""
    return tuple(row.name for row in KEYS if on in row.on)


def fields(on: str, devices: dict[str, Device]) -> dict[str, Parse]:
    """Each key that may stand there -> its reader."""
    return {row.name: row.reader(devices) for row in KEYS if on in row.on}
