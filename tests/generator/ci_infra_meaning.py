"""What ci-infra's pipeline generator makes of a test-area file, step by step: the facts of
../reference (defaults, inheritance from the file, queue routing, mirror merging), written as data so that two
files can be compared for meaning rather than text."""

from __future__ import annotations

from typing import Any

from spec_decode_ci.generator.routing import queue_for
from spec_decode_ci.generator.upstream import step_id

DEFAULT_WORKING_DIR = "/vllm-workspace/tests"
STEP_DEFAULTS = {"soft_fail": False, "optional": False, "mount_buildkite_agent": False, "no_plugin": False,
                 "no_gpu": False, "dind": True, "automatic_shard": False}


def _mirror(step: dict[str, Any], amd: dict[str, Any], parent_sources: list[str]) -> dict[str, Any]:
    sources = list(amd.get("source_file_dependencies") or [])
    sources += [s for s in parent_sources if s not in sources]
    env = dict(step.get("env") or {})
    env.update(amd.get("env") or {})
    num_devices = next((v for v in (amd.get("num_devices"), amd.get("num_gpus"), step.get("num_devices"))
                        if v is not None), None)
    return {
        "label": amd.get("label"),
        "device": amd["device"],
        "queue": queue_for(amd["device"], num_devices),
        "num_devices": num_devices,
        "commands": amd.get("commands") or step.get("commands"),
        "working_dir": amd.get("working_dir", step.get("working_dir")),
        "env": env,
        "depends_on": amd.get("depends_on"),
        "dind": amd.get("dind", True),
        "soft_fail": amd.get("soft_fail", step.get("soft_fail", False)),
        "optional": amd.get("optional", step.get("optional", False)),
        "timeout_in_minutes": amd.get("timeout_in_minutes"),
        "parallelism": step.get("parallelism"),
        "parallelism_written": amd.get("parallelism"),
        "source_file_dependencies": sources,
        "no_plugin": amd.get("no_plugin", False),
        "no_gpu": amd.get("no_gpu", step.get("no_gpu", False)),
    }


def effective_steps(data: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """Each step of a test-area file (parsed YAML, read from repository path ``path``) as ci-infra sees it,
    by key (a step without a key gets ci-infra's key from its label)."""
    out: dict[str, dict[str, Any]] = {}
    group, file_depends_on = data.get("group"), data.get("depends_on")
    for step in data.get("steps") or []:
        effective = {**STEP_DEFAULTS, **{k: v for k, v in step.items() if v is not None and k != "mirror"}}
        effective["group"] = group or step.get("group", "")
        if file_depends_on:
            effective["depends_on"] = step.get("depends_on") or file_depends_on
            effective["working_dir"] = step.get("working_dir") or DEFAULT_WORKING_DIR
            effective["source_file_dependencies"] = [*(step.get("source_file_dependencies") or []), path]
        effective["queue"] = queue_for(step.get("device"), step.get("num_devices"))
        mirror = (step.get("mirror") or {}).get("amd")
        if mirror:
            effective["mirror_amd"] = _mirror(step, mirror, step.get("source_file_dependencies") or [])
        out[step_id(step)] = effective
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Field -> (a's value, b's value) wherever two effective steps differ."""
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
