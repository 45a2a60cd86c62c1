"""`generate-pipeline upstream PATH`: the matrix's copy of vLLM's steps against vLLM's own test-area file.

Both sides are read with the same step readers (a key ci-infra would drop is a located error on either side) and
compared key by key, per step: kept, changed (which keys), added (in vLLM's file only), removed (in the matrix
only). Steps of the harness's own suites that vLLM's file carries (where it is the generated file) are not vLLM's
and are left out. The drift says what to copy into the matrix: each changed or added step as vLLM writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spec_decode_ci.generator.expand import area_step, expand
from spec_decode_ci.generator.importer import area_file_steps
from spec_decode_ci.generator.load import Document
from spec_decode_ci.generator.model import Matrix
from spec_decode_ci.generator.render import plain_fields, yaml_value

FILE_KEYS = ("group", "depends_on")  # the file's own keys, which every step inherits


@dataclass(frozen=True)
class StepChange:
    key: str
    notes: tuple[str, ...]  # per changed key (a mirror's as mirror.amd.<key>): matrix value -> vLLM's value, or the
    # list entries added / removed


@dataclass
class AreaDrift:
    """What differs between the matrix's vLLM steps and vLLM's file; empty when they say the same."""

    upstream: str  # vLLM's file, as named on the command line
    kept: list[str] = field(default_factory=list)
    changed: list[StepChange] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    file_keys: list[str] = field(default_factory=list)  # FILE_KEYS that differ
    ours: list[str] = field(default_factory=list)  # the harness's steps found in vLLM's file (not compared)
    to_copy: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> vLLM's step, for changed and added

    @property
    def differs(self) -> bool:
        return bool(self.changed or self.added or self.removed or self.file_keys)

    def as_figure(self) -> dict[str, Any]:
        """Plain data for a results file (``spec_decode_ci.results``) and the annotation."""
        return {"upstream": self.upstream, "differs": self.differs, "kept": self.kept, "added": self.added, "removed": self.removed,
                "changed": {c.key: list(c.notes) for c in self.changed}, "file_keys": self.file_keys,
                "to_copy": self.copy_text()}

    def copy_text(self) -> str:
        """The YAML of each changed or added step as vLLM writes it, for the matrix's `steps` list."""
        return "".join(yaml_value([step], 0).lstrip("\n") + "\n" for step in self.to_copy.values())

    def text(self) -> str:
        lines = [f"vLLM's test-area file {self.upstream} against the matrix's vLLM steps:"]
        lines += [f"  file     {key} differs" for key in self.file_keys]
        lines += [f"  changed  {c.key}: {'; '.join(c.notes)}" for c in self.changed]
        lines += [f"  added    {key} (in vLLM's file, not in the matrix)" for key in self.added]
        lines += [f"  removed  {key} (in the matrix, not in vLLM's file)" for key in self.removed]
        lines.append(f"{len(self.kept)} kept, {len(self.changed)} changed, {len(self.added)} added, "
                     f"{len(self.removed)} removed" + (f"; {len(self.ours)} of the harness's own steps not compared"
                                                       if self.ours else ""))
        if self.to_copy:
            lines.append("To follow vLLM, put these in the matrix's `steps` (replacing the steps of the same key):")
            lines.append(self.copy_text().rstrip("\n"))
        if self.removed:
            lines.append(f"and drop the matrix's steps {', '.join(self.removed)}.")
        return "\n".join(lines) + "\n"


def step_id(fields: dict[str, Any]) -> str:
    """A step's key, or the key ci-infra gives a step without one (from its label)."""
    return fields.get("key") or fields["label"].replace(" ", "-").lower().replace("(", "").replace(")", "")


def _notes(key: str, ours: Any, theirs: Any) -> list[str]:
    """A note for each difference of one key; a mirror is compared key by key."""
    if key == "mirror" and isinstance(ours, dict) and isinstance(theirs, dict):
        out = []
        for vendor in sorted(set(ours) | set(theirs)):
            a, b = ours.get(vendor) or {}, theirs.get(vendor) or {}
            for sub in [k for k in {**a, **b} if a.get(k) != b.get(k)]:
                out += _notes(f"mirror.{vendor}.{sub}", a.get(sub), b.get(sub))
        return out
    if isinstance(ours, list) and isinstance(theirs, list):
        plus = [f"+ {v}" for v in theirs if v not in ours]
        minus = [f"- {v}" for v in ours if v not in theirs]
        moved = [] if plus or minus else ["reordered"]
        return [f"{key} ({', '.join(plus + minus + moved)})"]
    if theirs is None:
        return [f"{key} ({ours!r} in the matrix, absent in vLLM's file)"]
    if ours is None:
        return [f"{key} (absent in the matrix, {theirs!r} in vLLM's file)"]
    return [f"{key} ({ours!r} in the matrix, {theirs!r} in vLLM's file)"]


def compare(matrix: Matrix, upstream: Document, locate) -> AreaDrift:
    """The drift between ``matrix``'s test-area steps and vLLM's file ``upstream``; raises a located
    ``InputError`` where vLLM's file holds what ci-infra would drop."""
    group, depends_on, steps = area_file_steps(upstream)
    theirs = {step_id(s): s for s in (plain_fields(step.fields) for step in steps)}
    ours = {step_id(s): s for s in (plain_fields(area_step(matrix, step).fields) for step in matrix.steps)}
    harness = {step.key for step in expand(matrix, locate) if step.suite is not None}
    drift = AreaDrift(upstream.file)
    file_ours = {"group": matrix.group, "depends_on": list(matrix.depends_on) if matrix.depends_on else None}
    file_theirs = {"group": group, "depends_on": list(depends_on) if depends_on else None}
    drift.file_keys = [k for k in FILE_KEYS if file_ours[k] != file_theirs[k]]
    for key, step in theirs.items():
        if key in harness:
            drift.ours.append(key)
        elif key not in ours:
            drift.added.append(key)
    for key, step in ours.items():
        if key not in theirs:
            drift.removed.append(key)
            continue
        notes = [note for k in dict.fromkeys([*step, *theirs[key]]) if step.get(k) != theirs[key].get(k)
                 for note in _notes(k, step.get(k), theirs[key].get(k))]
        if notes:
            drift.changed.append(StepChange(key, tuple(notes)))
        else:
            drift.kept.append(key)
    followed = set(drift.added) | {c.key for c in drift.changed}
    drift.to_copy = {key: step for key, step in theirs.items() if key in followed}  # in vLLM's order
    return drift
