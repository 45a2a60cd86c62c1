"""Every attention backend the build-path tier drives, one record each: its vLLM modules (the one its builder and
regressions live in, those whose GPU answers the emulated platform forgets, those whose page locking it sets,
those that ask whether TRTLLM kernels ship), how the self-check copies its module, its options and its harness.

The shared core iterates this registry (``emulation`` and ``buildpath.regressions``); the options and harness
live in the backend's own package and are named here as ``"module:attribute"``, imported when first used, so
the core never imports a backend. The ``build_harness`` fixture (``spec_decode_ci.pytest_plugin``) serves a
harness of any registered backend from its options: ``build_harness(MlaOptions(backend="FLASHMLA"))``.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backend:
    name: str
    # The vLLM module of its metadata builder (a backend family's common builder): the one its regressions edit;
    # builders of the family defined in other modules are built on it.
    module: str
    options: str  # "module:Class": a frozen dataclass whose defaults describe the backend's usual builder
    harness: str  # "module:function": (options, emulated GPU) -> a harness of the real builder
    # vLLM modules whose ``functools`` caches hold answers derived from the GPU's capability.
    gpu_answering: tuple[str, ...] = ()
    # vLLM modules that decide whether host memory is page-locked (PIN_MEMORY, is_pin_memory_available).
    page_locking: tuple[str, ...] = ()
    # vLLM modules that ask whether the GPU ships TRTLLM kernels (supports_trtllm_attention, has_nvidia_artifactory).
    kernel_probes: tuple[str, ...] = ()
    # For a module whose import has side effects (it registers custom ops, so it is never executed again): the
    # top-level definitions a copy of it compiles again, in a namespace that is otherwise the module's own.
    # Empty: a copy compiles the whole module.
    recompiled: tuple[str, ...] = ()
    # The functions of ``module`` the self-check's mutation run makes operator mutants of (``Class.method`` or a
    # module-level function): the builder's ``build()`` and the helpers it calls (spec_decode_ci.mutation).
    mutated: tuple[str, ...] = ()

    def options_class(self) -> type:
        return _resolve(self.options)

    def make_harness(self, options: Any, gpu: Any) -> Any:
        return _resolve(self.harness)(options, gpu)


def _resolve(reference: str) -> Any:
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(module), attribute)


FLASHINFER_UTILS = "vllm.utils.flashinfer"

BACKENDS: dict[str, Backend] = {b.name: b for b in [
    Backend("flashinfer", "vllm.v1.attention.backends.flashinfer",
            options="spec_decode_ci.flashinfer.builder:BuilderOptions",
            harness="spec_decode_ci.flashinfer.harness:make_harness",
            gpu_answering=(FLASHINFER_UTILS, "vllm.v1.attention.backends.flashinfer"),
            page_locking=(FLASHINFER_UTILS, "vllm.v1.attention.backends.flashinfer"),
            kernel_probes=(FLASHINFER_UTILS, "vllm.v1.attention.backends.flashinfer"),
            mutated=("FlashInferMetadataBuilder.build", "FlashInferMetadataBuilder._compute_decode_query_lens",
                     "FlashInferMetadataBuilder._compute_flashinfer_kv_metadata",
                     "FlashInferMetadataBuilder._get_decode_mask")),
    Backend("mla", "vllm.model_executor.layers.attention.mla_attention",
            options="spec_decode_ci.mla.builder:MlaOptions",
            harness="spec_decode_ci.mla.harness:make_harness",
            # the per-platform MLA prefill backend selector, where this vLLM has one
            gpu_answering=("vllm.v1.attention.backends.mla.prefill.selector",),
            page_locking=("vllm.model_executor.layers.attention.mla_attention",),
            recompiled=("MLACommonMetadataBuilder",),
            mutated=("MLACommonMetadataBuilder.build", "build_mla_chunked_context_metadata")),
]}


def backend_for(options: Any) -> Backend:
    """The registered backend whose options ``options`` are."""
    for backend in BACKENDS.values():
        if isinstance(options, backend.options_class()):
            return backend
    raise TypeError(f"{type(options).__name__} are no registered backend's options; registered: "
                    f"{', '.join(f'{b.name} ({b.options})' for b in BACKENDS.values())}")


def backend_of_module(module: str) -> Backend | None:
    """The registered backend whose builder module is ``module`` (None: no backend's)."""
    return next((b for b in BACKENDS.values() if b.module == module), None)


def vllm_modules(role: str) -> tuple[types.ModuleType, ...]:
    """Every registered backend's vLLM modules of ``role`` (a field: ``gpu_answering``, ``page_locking``,
    ``kernel_probes``), imported, each once; a module this vLLM does not have is left out (it has no such
    answers or decisions to emulate)."""
    found: list[types.ModuleType] = []
    for backend in BACKENDS.values():
        for name in getattr(backend, role):
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name and (name + ".").startswith(exc.name + "."):
                    continue
                raise
            if module not in found:
                found.append(module)
    return tuple(found)
