#!/usr/bin/env python3
"""The wheels a vLLM release needs on a machine without a package registry, read from the release's own
requirements (its wheel's Requires-Dist, then each needed wheel's, transitively), less what the machine has.

    smoke_pieces.py WHEELS_DIR RELEASE HAVE_FILE [--without NAME ...]

vLLM RELEASE's wheel and the wheels it needs are downloaded into WHEELS_DIR. HAVE_FILE is the
machine's ``pip list --format=freeze``: a requirement that an installed version satisfies is not carried, one it
does not satisfy is (a version the release pins differently), and one pinned on a package the machine must keep
(torch, with the CUDA it was built for) is an error. ``--without NAME`` leaves a package out with everything only
it needs; the script prints each wheel, its size and which requirement brought it.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Callable

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

TARGET = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
          "implementation_name": "cpython", "platform_machine": "x86_64", "sys_platform": "linux",
          "platform_system": "Linux", "os_name": "posix"}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + ["manylinux2014_x86_64", "any"]
KEEP = {"torch"}  # the machine's own build (its CUDA): a release that pins another cannot run there


def requirements(wheel: Path, extras: set[str]) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(z.read(meta).decode())
    out = []
    for line in message.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**TARGET, "extra": e}) for e in (extras or {""})):
            out.append(req)
    return out


def wheel_version(wheel: Path) -> Version:
    return parse_wheel_filename(wheel.name)[1]


def download(req: Requirement, into: Path) -> Path:
    """The newest wheel for the machine that satisfies ``req`` (pip picks it), from ``into`` or downloaded there."""
    spec = str(Requirement(f"{req.name}{req.specifier}"))
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS),
                    "-d", str(into), spec], check=True, stderr=subprocess.DEVNULL)
    name = canonicalize_name(req.name)
    found = [w for w in into.glob("*.whl") if parse_wheel_filename(w.name)[0] == name
             and req.specifier.contains(wheel_version(w), prereleases=True)]
    if not found:
        raise LookupError(f"no wheel of {spec} for the machine")
    return max(found, key=wheel_version)


class CannotRun(Exception):
    """The release pins a package the machine must keep at another version, or its requirements conflict."""

    def __init__(self, message: str, requirer: str | None = None, unsatisfiable: str | None = None):
        super().__init__(message)
        self.requirer = requirer  # the carried package whose requirement it is (None: vLLM's own)
        self.unsatisfiable = unsatisfiable  # the package no wheel of which meets what is asked


Fetch = Callable[[Requirement], Path]


Constraint = tuple[str, Version, SpecifierSet]  # (the carried package asking, its version, what it asks)


def resolve_once(root: Path, have: dict[str, Version], without: set[str], fetch: Fetch, scratch,
                 excluded: dict[str, set[Version]], constraints: dict[str, list[Constraint]],
                 carried: dict[str, tuple[Path, str]]) -> dict[str, set[str]]:
    """One pass, first requirement first, filling ``carried`` (each wheel with the requirement that brought it);
    returns the extras asked of each package."""
    queue = [(r, "vllm") for r in requirements(root, set())]
    seen: dict[str, set[str]] = {}
    while queue:
        req, by = queue.pop(0)
        name = canonicalize_name(req.name)
        new = ({""} | set(req.extras)) - seen.get(name, set())
        if name in without or not new:
            continue
        seen.setdefault(name, set()).update(new)
        if name in carried:
            wheel = carried[name][0]
        elif name in have and req.specifier.contains(have[name], prereleases=True):
            new.discard("")  # an installed package's own requirements are installed with it
            if not new:
                continue
            wheel = scratch(name, have[name])
        elif name in KEEP:
            raise CannotRun(f"{by} needs {req}, the machine has {name} {have.get(name)}",
                            requirer=by if by in carried else None)
        else:
            spec = req.specifier & SpecifierSet(",".join(f"!={v}" for v in sorted(excluded.get(name, ()))))
            for _, _, asked in constraints.get(name, ()):
                spec &= asked
            try:
                wheel = fetch(Requirement(f"{req.name}{spec}"))
            except (LookupError, subprocess.CalledProcessError):
                raise CannotRun(f"{by} needs {req}: no wheel of {req.name}{spec} for the machine",
                                unsatisfiable=name) from None
            carried[name] = (wheel, f"{by}: {req}")
        queue += [(r, name) for r in requirements(wheel, new - {""}) if canonicalize_name(r.name) != name]
    return seen


def conflicts(carried: dict[str, tuple[Path, str]], seen: dict[str, set[str]], have: dict[str, Version],
              without: set[str]) -> tuple[list[tuple[str, Requirement, str]], list[str]]:
    """([(a carried package, its requirement of another carried package that the set does not meet, why)],
    [what a carried package asks of an installed one that the machine's version does not give: it is kept])."""
    versions = {n: wheel_version(w) for n, (w, _) in carried.items()}
    among, installed = [], []
    for name, (wheel, _) in carried.items():
        for req in requirements(wheel, seen[name] - {""}):
            dep = canonicalize_name(req.name)
            if dep in without:
                continue
            if dep in versions and not req.specifier.contains(versions[dep], prereleases=True):
                among.append((name, req, f"{wheel.name} needs {req}, the set has {dep} {versions[dep]}"))
            elif dep not in versions and dep in have and not req.specifier.contains(have[dep], prereleases=True):
                installed.append(f"{wheel.name} asks {req}; the machine's {dep} {have[dep]} is kept")
    return among, installed


def resolve(root: Path, have: dict[str, Version], without: set[str], fetch: Fetch, scratch,
            rounds: int = 50) -> dict[str, tuple[Path, str]]:
    """The wheels to carry, each with the requirement that brought it, consistent with one another and with the
    machine. Where a carried wheel A needs another version of a package B than the set holds, the next pass
    takes B as A asks (opentelemetry-sdk 1.34.0 needs opentelemetry-api==1.34.0); where B cannot be had so
    (vLLM 0.26.0 pins apache-tvm-ffi==0.1.10, xgrammar 0.2.9 needs >=0.1.11), A's version is excluded instead.
    ``fetch(req)`` gives a wheel that satisfies req; ``scratch(name, version)`` the wheel of an installed
    version, read for the requirements of an extra the install may lack (``pydantic-extra-types[pycountry]``
    where pydantic-extra-types is there)."""
    excluded: dict[str, set[Version]] = {}
    constraints: dict[str, list[Constraint]] = {}
    why = ""
    for _ in range(rounds):
        carried: dict[str, tuple[Path, str]] = {}
        try:
            seen = resolve_once(root, have, without, fetch, scratch, excluded, constraints, carried)
        except CannotRun as e:
            if e.unsatisfiable and constraints.get(e.unsatisfiable):
                asker, version, _ = constraints[e.unsatisfiable].pop()
                excluded.setdefault(asker, set()).add(version)
                continue
            if e.requirer is None:
                raise CannotRun(f"{e}{f' (after: {why})' if why else ''}") from None
            excluded.setdefault(e.requirer, set()).add(wheel_version(carried[e.requirer][0]))
            why = str(e)
            continue
        among, installed = conflicts(carried, seen, have, without)
        if not among:
            for line in installed:
                print(f"smoke_pieces: note: {line}", file=sys.stderr)
            return carried
        asker, req, why = among[0]
        constraint = (asker, wheel_version(carried[asker][0]), req.specifier)
        dep = canonicalize_name(req.name)
        if constraint in constraints.get(dep, []):
            excluded.setdefault(asker, set()).add(constraint[1])
        else:
            constraints.setdefault(dep, []).append(constraint)
    raise CannotRun(f"no consistent set after {rounds} rounds; last: {why}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("release")
    parser.add_argument("have", type=Path)
    parser.add_argument("--without", action="append", default=[])
    args = parser.parse_args()
    have = {}
    for line in args.have.read_text().splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            have[canonicalize_name(name)] = Version(version)
    scratch_dir = Path(tempfile.mkdtemp())

    @functools.cache  # each requirement asked of pip once, whatever the rounds
    def wheel_for(spec: str, into: Path) -> Path:
        return download(Requirement(spec), into)

    try:
        vllm = wheel_for(f"vllm=={args.release}", args.wheels)
        carried = resolve(vllm, have, {canonicalize_name(n) for n in args.without},
                          lambda req: wheel_for(str(req), args.wheels),
                          lambda name, version: wheel_for(f"{name}=={version}", scratch_dir))
    except CannotRun as e:
        print(f"smoke_pieces: {e}: it cannot run there", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch_dir)
    keep = {vllm} | {w for w, _ in carried.values()}
    for wheel in set(args.wheels.glob("*.whl")) - keep:
        wheel.unlink()  # a version tried and excluded
    for wheel, why in carried.values():
        print(f"{wheel.stat().st_size / 2**20:8.1f} MiB  {wheel.name}  ({why})")
    total = sum(w.stat().st_size for w, _ in carried.values())
    print(f"{total / 2**20:8.1f} MiB in {len(carried)} wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
