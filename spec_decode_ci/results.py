"""One results file per run of the harness's suites: what ran, where, and every figure its checks measured.

A pytest run with ``--spec-decode-results PATH`` (the harness's plugin) writes it when the run ends; the CI
steps upload it beside the JUnit file and ``spec-decode-ci report`` reads it. The schema, version
``SCHEMA_VERSION`` (``docs/results.md`` describes each field)::

    {"schema": "spec-decode-ci/results", "schema_version": 1,
     "step": {"key", "label", "build_id", "build_number", "build_url"},   # Buildkite's, or null off CI
     "started_at", "finished_at": ISO 8601 UTC, "exit_status": int,
     "vllm": {"version", "commit"}, "device": {"name", "capabilities": [...]},
     "runner": "V1" | "V2" | "V1+V2" | null,                              # the model runners the cases ran on
     "summary": {"passed", "failed", "error", "skipped": int},
     "cases": [{"id", "runner", "figures": {name: value},
                "checks": [{"test", "outcome", "message", "duration_s"}]}]}

A case is what an end-to-end check names (``case`` user property: an e2e case id); every other test belongs to
the case of its module (``test_guard_truth_table``). Figures are the tests' user properties (``record_property``):
numbers, strings, lists and objects, as measured. Figures the report reads by name are in ``FIGURES``.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

SCHEMA = "spec-decode-ci/results"
SCHEMA_VERSION = 1
OUTCOMES = ("failed", "error", "passed", "skipped")  # worst first
CASE_PROPERTY = "case"  # the user property naming a test's case
RUNNER_PROPERTY = "runner"  # the user property naming the model runner a case's engine ran on

# The figures the report compares by name (checks record them with record_property).
ACCEPTANCE_PER_POSITION = "acceptance_per_position"  # {"measured": [rate per draft position], "expected": [...] | null}
ACCEPTANCE_LENGTH = "acceptance_length"
HOST_SYNC_SITES = "host_sync_sites"  # {"file:line in function": syncs over the run's speculative steps}
HOST_SYNCS_PER_STEP_MAX = "host_syncs_per_step_max"
MIXED_BATCHES = "mixed_batches"
ENGINE_START_S = "engine_start_s"  # {"speculative": s, "baseline": s}: LLM() until it returns
# {"upstream", "differs", "kept", "added", "removed", "changed": {key: [notes]}, "file_keys", "to_copy": YAML}: vLLM's test-area
# file against the matrix (generator.upstream)
VLLM_AREA_DRIFT = "vllm_area_drift"
# {"resolved", "compile_mode", "max_capture_size", "dispatched": {"target.spec_decode": {mode: batches}, ...},
#  "vllm_said": [log lines], "expected": mode | null}: the CUDA-graph mode a speculative engine ran (e2e.cuda_graphs)
CUDA_GRAPHS = "cuda_graphs"
# {"backend", "generated", "run", "killed", "equivalent", "rate", "goal", "missing_functions", "survivors",
#  "stale_equivalents", "errors"}: the build-path tier against operator mutants of a backend (mutation.run.Score)
MUTATION_SCORE = "mutation_score"
# {"speedup", "speculative": {"tokens_per_s", "min", "max", "runs", "output_tokens", "tpot_ms", "gpu_idle_share",
#  "start_s"}, "target": {...}, "floor": x | null, "command": str}: both engines as vLLM runs by default (e2e.speed)
SPEED = "speed"
FIGURES = (ACCEPTANCE_PER_POSITION, ACCEPTANCE_LENGTH, HOST_SYNC_SITES, HOST_SYNCS_PER_STEP_MAX, MIXED_BATCHES,
           ENGINE_START_S, VLLM_AREA_DRIFT, CUDA_GRAPHS, MUTATION_SCORE, SPEED)
MESSAGE_CHARS = 600  # a check's message is cut here: an annotation must stay short


class ResultsError(ValueError):
    """A results file that cannot be read: ``where`` names the file and the key, ``expected`` what was wanted."""

    def __init__(self, where: str, expected: str):
        super().__init__(f"{where}: {expected}")
        self.where, self.expected = where, expected


@dataclass
class TestRecord:
    """One test as the run ended it."""

    test: str  # pytest's node id
    case: str
    outcome: str  # one of OUTCOMES
    message: str | None
    duration_s: float
    properties: dict[str, Any]


def case_of(nodeid: str, properties: dict[str, Any]) -> str:
    """The case a test belongs to: the one it names, else its module's name."""
    named = properties.get(CASE_PROPERTY)
    if named:
        return str(named)
    return Path(nodeid.split("::", 1)[0]).stem


def _installed_vllm() -> dict[str, str | None]:
    """vLLM's version and, where the install records it, its commit (a dev build's ``+g<sha>``, or the VCS commit
    pip recorded), read from the distribution's metadata, without importing vLLM."""
    try:
        dist = metadata.distribution("vllm")
    except metadata.PackageNotFoundError:
        return {"version": None, "commit": None}
    version = dist.version
    commit = None
    found = re.search(r"\+g([0-9a-f]{7,40})", version)
    if found:
        commit = found.group(1)
    else:
        direct = dist.read_text("direct_url.json")
        if direct:
            commit = json.loads(direct).get("vcs_info", {}).get("commit_id")
    return {"version": version, "commit": commit}


def _step(environ) -> dict[str, Any]:
    number = environ.get("BUILDKITE_BUILD_NUMBER")
    return {"key": environ.get("BUILDKITE_STEP_KEY"), "label": environ.get("BUILDKITE_LABEL"),
            "build_id": environ.get("BUILDKITE_BUILD_ID"),
            "build_number": int(number) if number and number.isdigit() else None,
            "build_url": environ.get("BUILDKITE_BUILD_URL")}


def _device(environ) -> dict[str, Any]:
    from spec_decode_ci.generator.names import CAPABILITIES_ENV, DEVICE_ENV

    listed = environ.get(CAPABILITIES_ENV)
    return {"name": environ.get(DEVICE_ENV),
            "capabilities": sorted(c for c in listed.split(",") if c) if listed else []}


def runners_label(runners) -> str | None:
    """"V1", "V2", "V1+V2" (several cases on different runners) or None where no case reported one."""
    found = sorted({r for r in runners if r})
    return "+".join(found) or None


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def build_results(records: list[TestRecord], started_at: str, exit_status: int,
                  environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The results document of a run whose tests ended as ``records``."""
    environ = os.environ if environ is None else environ
    cases: dict[str, dict[str, Any]] = {}
    summary = dict.fromkeys(OUTCOMES, 0)
    for record in records:
        summary[record.outcome] += 1
        case = cases.setdefault(record.case, {"id": record.case, "runner": None, "figures": {}, "checks": []})
        figures = {k: v for k, v in record.properties.items() if k not in (CASE_PROPERTY, RUNNER_PROPERTY)}
        case["figures"].update(figures)
        case["runner"] = case["runner"] or record.properties.get(RUNNER_PROPERTY)
        case["checks"].append({"test": record.test, "outcome": record.outcome, "message": record.message,
                               "duration_s": round(record.duration_s, 3)})
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "step": _step(environ), "started_at": started_at,
            "finished_at": now(), "exit_status": int(exit_status), "vllm": _installed_vllm(),
            "device": _device(environ), "runner": runners_label(c["runner"] for c in cases.values()),
            "summary": summary, "cases": list(cases.values())}


def write(path: Path, results: dict[str, Any]) -> None:
    """Write ``results`` whole or not at all (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(results, indent=1, sort_keys=False, default=str) + "\n")
    os.replace(partial, path)


# --- reading ----------------------------------------------------------------------------------------------------

def _expect(value: Any, kind: type, where: str, what: str, nullable: bool = False) -> Any:
    if value is None and nullable:
        return value
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ResultsError(where, f"expected {what}, got {json.dumps(value)[:80]}")
    return value


def validate(data: Any, where: str) -> dict[str, Any]:
    """``data`` as a results document, or a ``ResultsError`` naming the key and what it should hold."""
    _expect(data, dict, where, "a JSON object (a spec-decode-ci results file)")
    if data.get("schema") != SCHEMA:
        raise ResultsError(f"{where}: schema", f"expected {SCHEMA!r}, got {data.get('schema')!r}")
    version = data.get("schema_version")
    _expect(version, int, f"{where}: schema_version", "an integer")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{where}: schema_version", f"version {version} is newer than this spec-decode-ci reads "
                                                       f"(up to {SCHEMA_VERSION}); upgrade spec-decode-ci")
    if version < 1:
        raise ResultsError(f"{where}: schema_version", f"expected 1 to {SCHEMA_VERSION}, got {version}")
    for key in ("step", "vllm", "device", "summary"):
        _expect(data.get(key), dict, f"{where}: {key}", "an object")
    for key in ("started_at", "finished_at"):
        _expect(data.get(key), str, f"{where}: {key}", "an ISO 8601 time")
    _expect(data.get("exit_status"), int, f"{where}: exit_status", "an integer")
    _expect(data.get("runner"), str, f"{where}: runner", "a model runner name or null", nullable=True)
    cases = _expect(data.get("cases"), list, f"{where}: cases", "a list of cases")
    for i, case in enumerate(cases):
        at = f"{where}: cases[{i}]"
        _expect(case, dict, at, "a case object")
        _expect(case.get("id"), str, f"{at}.id", "a case id")
        _expect(case.get("figures"), dict, f"{at}.figures", "an object of figures")
        checks = _expect(case.get("checks"), list, f"{at}.checks", "a list of checks")
        for j, check in enumerate(checks):
            _expect(check, dict, f"{at}.checks[{j}]", "a check object")
            _expect(check.get("test"), str, f"{at}.checks[{j}].test", "a test id")
            if check.get("outcome") not in OUTCOMES:
                raise ResultsError(f"{at}.checks[{j}].outcome",
                                   f"expected one of {', '.join(OUTCOMES)}, got {check.get('outcome')!r}")
            _expect(check.get("message"), str, f"{at}.checks[{j}].message", "a string or null", nullable=True)
        per_position = case["figures"].get(ACCEPTANCE_PER_POSITION)
        if per_position is not None:
            _expect(per_position, dict, f"{at}.figures.{ACCEPTANCE_PER_POSITION}", "an object with 'measured'")
            _expect(per_position.get("measured"), list, f"{at}.figures.{ACCEPTANCE_PER_POSITION}.measured",
                    "a list of rates per draft position")
    return data


def load(path: Path) -> dict[str, Any]:
    """The results document at ``path``, validated; a ``ResultsError`` naming the file and key otherwise."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResultsError(str(path), f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}:{exc.lineno}:{exc.colno}", f"expected JSON: {exc.msg}") from None
    return validate(data, str(path))


def load_all(paths) -> list[dict[str, Any]]:
    """Every results file named, a folder standing for the ``*.json`` files under it."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(path.rglob("*.json"))
        else:
            found.append(path)
    return [load(p) for p in found]


def step_key(results: dict[str, Any]) -> str | None:
    return results["step"].get("key")
