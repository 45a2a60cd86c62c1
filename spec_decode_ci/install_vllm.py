"""Installs the vLLM a compatibility-lane or nightly step runs the suites on: the one place that says how.

    python -m spec_decode_ci.install_vllm 0.34.0                       # a release
    python -m spec_decode_ci.install_vllm nightly --index-url URL      # vLLM's nightly wheel from that index

First a plain ``pip install``. Where that cannot resolve because the release pins a dependency exactly at a
version the registry does not serve (vLLM 0.34.0 pins ``flashinfer-python==0.7.3``; the registry serves 0.7.2.post1
and 0.7.4), each such pin is replaced by the nearest version the registry serves (the next newer one, else the
newest older one), the dependencies are installed with pip resolving everything else, and vLLM itself with
``--no-deps``. Every replacement is printed; nothing else differs from the release's own requirements.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Sequence

NIGHTLY = "nightly"
EXACT_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\[[^\]]*\])?\s*==\s*(?P<version>[^\s,;]+)"
                       r"\s*(?P<marker>;.*)?$")


def _version_key(version: str):
    from packaging.version import Version

    return Version(version)


def nearest_served(pinned: str, served: Sequence[str]) -> str | None:
    """The served version nearest ``pinned``: the smallest newer one, else the largest older one."""
    newer = sorted((v for v in served if _version_key(v) > _version_key(pinned)), key=_version_key)
    older = sorted((v for v in served if _version_key(v) < _version_key(pinned)), key=_version_key)
    return newer[0] if newer else (older[-1] if older else None)


def runtime_requirements(metadata: str) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA that apply without extras."""
    return [line.split(":", 1)[1].strip() for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def replace_unserved_pins(requirements: Sequence[str], served: Callable[[str], Sequence[str]]
                          ) -> tuple[list[str], list[str]]:
    """(requirements with each exact pin the registry does not serve replaced by the nearest served version,
    one line per replacement)."""
    out, replaced = [], []
    for requirement in requirements:
        pin = EXACT_PIN.match(requirement)
        if pin:
            versions = served(pin["name"])
            if pin["version"] not in versions:
                nearest = nearest_served(pin["version"], versions)
                if nearest is None:
                    raise SystemExit(f"install_vllm: the registry serves no version of {pin['name']} "
                                     f"(pinned {pin['version']})")
                requirement = f"{pin['name']}{pin['extras'] or ''}=={nearest}{pin['marker'] or ''}"
                replaced.append(f"{pin['name']}=={pin['version']} is not served; installing {nearest} (nearest)")
        out.append(requirement)
    return out, replaced


def _pip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=check)


def served_versions(name: str, index_args: Sequence[str] = ()) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, *index_args],
                          capture_output=True, text=True)
    found = re.search(r"^Available versions: (.*)$", proc.stdout, re.M)
    return [v.strip() for v in found.group(1).split(",")] if found else []


def install(target: str, index_url: str | None = None) -> int:
    spec = "vllm" if target == NIGHTLY else f"vllm=={target}"
    index_args = ["--pre", "--extra-index-url", index_url] if index_url else []
    if _pip("install", "--quiet", *index_args, spec, check=False).returncode == 0:
        return 0
    with tempfile.TemporaryDirectory(prefix="install-vllm-") as tmp:
        _pip("download", "--quiet", "--no-deps", *index_args, spec, "-d", tmp)
        wheel = next(Path(tmp).glob("vllm-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        requirements, replaced = replace_unserved_pins(runtime_requirements(metadata),
                                                       lambda name: served_versions(name, index_args))
        if not replaced:
            print(f"install_vllm: {spec} does not resolve, and every exact pin it makes is served", file=sys.stderr)
            return 1
        for line in replaced:
            print(f"install_vllm: {wheel.name}: {line}", flush=True)
        _pip("install", "--quiet", *index_args, *requirements)
        _pip("install", "--quiet", "--no-deps", str(wheel))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec_decode_ci.install_vllm", description=__doc__.split("\n")[0])
    parser.add_argument("target", help="a vLLM release such as 0.34.0, or 'nightly'")
    parser.add_argument("--index-url", help="the package index of vLLM's nightly wheels (with 'nightly')")
    args = parser.parse_args(argv)
    if (args.target == NIGHTLY) != bool(args.index_url):
        parser.error("'nightly' takes --index-url, and only it does")
    if args.target != NIGHTLY and not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", args.target):
        parser.error(f"expected a release such as 0.34.0 or 'nightly', got {args.target!r}")
    try:
        return install(args.target, args.index_url)
    except subprocess.CalledProcessError as exc:
        print(f"install_vllm: {' '.join(exc.cmd)} exited {exc.returncode}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
