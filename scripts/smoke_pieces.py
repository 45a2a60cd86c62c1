#!/usr/bin/env python3
"""The wheels a vLLM release needs on a machine without a package registry, read from the release's own
requirements (its wheel's Requires-Dist, then each needed wheel's, transitively), less what the machine has.

    smoke_pieces.py WHEELS_DIR HAVE_FILE [--without NAME ...]

WHEELS_DIR holds the release's vLLM wheel; the wheels it needs are downloaded beside it. HAVE_FILE is the
machine's ``pip list --format=freeze``: a requirement that an installed version satisfies is not carried, one it
does not satisfy is (a version the release pins differently), and one pinned on a package the machine must keep
(torch, with the CUDA it was built for) is an error. ``--without NAME`` leaves a package out with everything only
it needs; the script prints each wheel, its size and which requirement brought it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
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


def download(req: Requirement, into: Path) -> Path:
    before = set(into.glob("*.whl"))
    spec = str(Requirement(f"{req.name}{req.specifier}"))
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS),
                    "-d", str(into), spec], check=True, stderr=subprocess.DEVNULL)
    new = set(into.glob("*.whl")) - before
    name = canonicalize_name(req.name)
    found = [w for w in (new or into.glob("*.whl")) if canonicalize_name(w.name.split("-")[0]) == name]
    return found[0]


class CannotRun(Exception):
    """The release pins a package the machine must keep at another version."""


def resolve(root: Path, have: dict[str, Version], without: set[str], fetch, scratch) -> dict[str, tuple[Path, str]]:
    """The wheels to carry, each with the requirement that brought it. ``fetch(req)`` gives a wheel that satisfies
    req; ``scratch(name, version)`` the wheel of an installed version, read for the requirements of an extra that
    the machine's install may lack (``pydantic-extra-types[pycountry]`` where pydantic-extra-types is there)."""
    queue = [(r, "vllm") for r in requirements(root, set())]
    carried: dict[str, tuple[Path, str]] = {}
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
            raise CannotRun(f"{by} needs {req}, the machine has {name} {have.get(name)}")
        else:
            wheel = fetch(req)
            carried[name] = (wheel, f"{by}: {req}")
        queue += [(r, name) for r in requirements(wheel, new - {""}) if canonicalize_name(r.name) != name]
    return carried


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("have", type=Path)
    parser.add_argument("--without", action="append", default=[])
    args = parser.parse_args()
    have = {}
    for line in args.have.read_text().splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            have[canonicalize_name(name)] = Version(version)
    (vllm,) = args.wheels.glob("vllm-*.whl")
    scratch_dir = Path(tempfile.mkdtemp())
    try:
        carried = resolve(vllm, have, {canonicalize_name(n) for n in args.without},
                          lambda req: download(req, args.wheels),
                          lambda name, version: download(Requirement(f"{name}=={version}"), scratch_dir))
    except CannotRun as e:
        print(f"smoke_pieces: {e}: it cannot run there", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch_dir)
    for wheel, why in carried.values():
        print(f"{wheel.stat().st_size / 2**20:8.1f} MiB  {wheel.name}  ({why})")
    total = sum(w.stat().st_size for w, _ in carried.values())
    print(f"{total / 2**20:8.1f} MiB in {len(carried)} wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
