"""spec_decode_ci.backends: each registered backend's modules are the installed vLLM's, and the core reads its
modules from the registry alone (a module a release lacks is left out; any other import failure is not)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from spec_decode_ci import backends
from spec_decode_ci.backends import BACKENDS


@pytest.mark.build_path
@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_backend_names_a_vllm_builder_module(name):
    """The module a backend's regressions edit is vLLM's and defines a metadata builder; its options and harness
    resolve; the definitions its copies compile again exist there."""
    backend = BACKENDS[name]
    module = importlib.import_module(backend.module)
    builders = [n for n, v in vars(module).items()
                if inspect.isclass(v) and n.endswith("MetadataBuilder") and v.__module__ == module.__name__]
    assert builders, f"{backend.module} defines no metadata builder"
    assert dataclasses.is_dataclass(backend.options_class())
    assert callable(backends._resolve(backend.harness))
    for definition in backend.recompiled:
        assert hasattr(module, definition), f"{backend.module} has no {definition}"
    assert backends.backend_for(backend.options_class()()) is backend
    assert backends.backend_of_module(backend.module) is backend


@pytest.mark.build_path
def test_emulation_reads_every_registered_module():
    """The modules emulation forgets GPU answers of and sets page locking in are the registry's, all of them that
    this vLLM has."""
    for role in ("gpu_answering", "page_locking", "kernel_probes"):
        named = [m for b in BACKENDS.values() for m in getattr(b, role)]
        found = [m.__name__ for m in backends.vllm_modules(role)]
        assert set(found) <= set(named) and found
        for name in set(named) - set(found):
            with pytest.raises(ModuleNotFoundError):
                importlib.import_module(name)


def test_a_module_this_vllm_lacks_is_left_out_and_a_broken_one_is_not(monkeypatch, tmp_path):
    broken = tmp_path / "spec_decode_ci_broken_module.py"
    broken.write_text("import spec_decode_ci_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    record = backends.Backend("x", "json", options="json:JSONDecoder", harness="json:loads",
                              gpu_answering=("json", "vllm.no_such_module"))
    monkeypatch.setattr(backends, "BACKENDS", {"x": record})
    assert [m.__name__ for m in backends.vllm_modules("gpu_answering")] == ["json"]
    monkeypatch.setattr(backends, "BACKENDS", {"x": dataclasses.replace(
        record, gpu_answering=("spec_decode_ci_broken_module",))})
    with pytest.raises(ModuleNotFoundError, match="spec_decode_ci_no_such_dependency"):
        backends.vllm_modules("gpu_answering")


def test_options_of_no_backend_are_refused():
    with pytest.raises(TypeError, match="no registered backend's options"):
        backends.backend_for(object())
