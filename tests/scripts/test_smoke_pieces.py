"""scripts/smoke_pieces.py: the wheels a release needs on a machine without a registry, read from the wheels'
own Requires-Dist (markers for that machine, extras included), less what the machine's installed versions
satisfy; a pin on the machine's own torch is refused. Resolved over small wheels built here."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smoke_pieces.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="needs the checkout's scripts/")


@pytest.fixture(scope="module")
def pieces():
    spec = importlib.util.spec_from_file_location("smoke_pieces", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Index:
    """A registry of wheels written on the fly: name -> {version: [Requires-Dist lines]}."""

    def __init__(self, root: Path, packages: dict[str, dict[str, list[str]]]):
        self.root, self.packages = root, packages

    def wheel(self, name: str, version: str) -> Path:
        path = self.root / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        meta = [f"Name: {name}", f"Version: {version}"]
        meta += [f"Requires-Dist: {line}" for line in self.packages[name][version]]
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", "\n".join(meta) + "\n")
        return path

    def fetch(self, req: Requirement) -> Path:
        versions = [v for v in self.packages[req.name] if SpecifierSet(str(req.specifier)).contains(v)]
        if not versions:
            raise LookupError(f"no wheel of {req}")  # as pip download fails
        return self.wheel(req.name, max(versions, key=Version))

    def scratch(self, name: str, version: Version) -> Path:
        return self.wheel(name, str(version))


def resolve(pieces, tmp_path, packages, have=None, without=()):
    index = Index(tmp_path, packages)
    root = index.wheel("vllm", "0.26.0")
    carried = pieces.resolve(root, {canonicalize_name(k): Version(v) for k, v in (have or {}).items()},
                             {canonicalize_name(n) for n in without}, index.fetch, index.scratch)
    return {name: path.name.split("-")[1] for name, (path, _) in carried.items()}


def test_transitive_requirements_for_the_machine_only(pieces, tmp_path):
    """Requirements follow each wheel's own; markers for another Python or platform are not carried."""
    packages = {
        "vllm": {"0.26.0": ["fastapi>=0.100", 'uvloop; sys_platform == "win32"', 'old; python_version < "3.10"']},
        "fastapi": {"0.99.0": [], "0.136.3": ["starlette<2"]},
        "starlette": {"1.10.0": [], "2.0.0": []},
        "uvloop": {"1.0": []}, "old": {"1.0": []},
    }
    assert resolve(pieces, tmp_path, packages) == {"fastapi": "0.136.3", "starlette": "1.10.0"}


def test_installed_versions_that_satisfy_are_not_carried(pieces, tmp_path):
    """A requirement an installed version satisfies stays on the machine; a pin it misses is carried."""
    packages = {"vllm": {"0.26.0": ["numpy>=2", "transformers==5.18.0"]},
                "numpy": {"2.5.2": ["never-fetched"]}, "transformers": {"5.17.0": [], "5.18.0": []}}
    assert resolve(pieces, tmp_path, packages, have={"numpy": "2.5.2", "transformers": "5.17.0"}) == {
        "transformers": "5.18.0"}


def test_an_extra_of_an_installed_package_brings_its_requirements(pieces, tmp_path):
    """``pydantic-extra-types[pycountry]`` where pydantic-extra-types is installed still carries pycountry."""
    packages = {"vllm": {"0.26.0": ["mistral-common[image]>=1.8"]},
                "mistral-common": {"1.13.1": ["pydantic-extra-types[pycountry]>=2.10", 'pillow; extra == "image"']},
                "pydantic-extra-types": {"2.11.1": ['pycountry>=23; extra == "pycountry"']},
                "pycountry": {"26.2.16": []}, "pillow": {"11.0": []}}
    carried = resolve(pieces, tmp_path, packages, have={"pydantic-extra-types": "2.11.1"})
    assert carried == {"mistral-common": "1.13.1", "pycountry": "26.2.16", "pillow": "11.0"}


def test_an_extra_asked_after_the_package_was_carried(pieces, tmp_path):
    """A later requirement naming an extra of a wheel already carried adds that extra's requirements."""
    packages = {"vllm": {"0.26.0": ["a", "b"]}, "a": {"1.0": ["c"]}, "b": {"1.0": ["c[x]"]},
                "c": {"1.0": ['d; extra == "x"']}, "d": {"1.0": []}}
    assert resolve(pieces, tmp_path, packages) == {"a": "1.0", "b": "1.0", "c": "1.0", "d": "1.0"}


def test_without_leaves_out_a_package_and_what_only_it_needs(pieces, tmp_path):
    packages = {"vllm": {"0.26.0": ["tilelang", "fastapi"]}, "tilelang": {"1.0": ["z3-solver"]},
                "z3-solver": {"4.0": []}, "fastapi": {"1.0": []}}
    assert resolve(pieces, tmp_path, packages, without=["TileLang"]) == {"fastapi": "1.0"}


def test_a_pin_on_the_machines_torch_is_refused(pieces, tmp_path):
    """torch is the machine's own build (its CUDA): a release pinning another cannot run there."""
    packages = {"vllm": {"0.26.0": ["torch==2.12.0"]}, "torch": {"2.12.0": []}}
    with pytest.raises(pieces.CannotRun, match=r"torch==2.12.0.*torch 2.11.0"):
        resolve(pieces, tmp_path, packages, have={"torch": "2.11.0"})
    assert resolve(pieces, tmp_path, {"vllm": {"0.26.0": ["torch==2.11.0"]}}, have={"torch": "2.11.0"}) == {}


def test_a_wheel_needing_another_version_than_the_set_holds_is_taken_older(pieces, tmp_path):
    """vLLM pins apache-tvm-ffi==0.1.10; xgrammar 0.2.9 needs >=0.1.11: the set takes xgrammar 0.2.8."""
    packages = {"vllm": {"0.26.0": ["xgrammar<1,>=0.2.1", "apache-tvm-ffi==0.1.10", "numpy", "mistral-common"]},
                "mistral-common": {"1.13.1": ["numpy<2.4"]},  # the machine's numpy 2.5.2 is kept
                "xgrammar": {"0.2.8": ["apache-tvm-ffi>=0.1.9"], "0.2.9": ["apache-tvm-ffi>=0.1.11"]},
                "apache-tvm-ffi": {"0.1.10": [], "0.1.11": []}}
    assert resolve(pieces, tmp_path, packages, have={"numpy": "2.5.2"}) == {
        "xgrammar": "0.2.8", "apache-tvm-ffi": "0.1.10", "mistral-common": "1.13.1"}


def test_a_wheel_needing_another_torch_is_taken_older_or_refused(pieces, tmp_path):
    """A carried wheel that needs a torch the machine cannot have is taken at an older version that does not."""
    packages = {"vllm": {"0.26.0": ["lib"]}, "lib": {"1.0": ["torch<3"], "2.0": ["torch>=3"]}}
    assert resolve(pieces, tmp_path, packages, have={"torch": "2.11.0"}) == {"lib": "1.0"}
    packages["lib"] = {"2.0": ["torch>=3"]}
    with pytest.raises(pieces.CannotRun, match=r"no wheel of lib!=2.0 for the machine \(after: lib needs torch>=3, the machine has torch 2.11.0\)"):
        resolve(pieces, tmp_path, packages, have={"torch": "2.11.0"})


def test_a_dependency_is_taken_as_the_wheel_needing_it_asks(pieces, tmp_path):
    """opentelemetry-sdk 1.34.0 needs opentelemetry-api==1.34.0 where another requirement brought the newest
    api: the set takes api 1.34.0, not an ever older sdk."""
    packages = {"vllm": {"0.26.0": ["opentelemetry-api", "opentelemetry-sdk<1.35"]},
                "opentelemetry-api": {"1.34.0": [], "1.45.3": []},
                "opentelemetry-sdk": {"1.33.0": ["opentelemetry-api==1.33.0"], "1.34.0": ["opentelemetry-api==1.34.0"]}}
    assert resolve(pieces, tmp_path, packages) == {"opentelemetry-api": "1.34.0", "opentelemetry-sdk": "1.34.0"}
