"""Every attention backend the build-path tier drives, one registration each: the options that shape its real
builder, the harness factory that builds one on an emulated GPU (on the self-check's regressed copy of vLLM's
module where ``$SPEC_DECODE_CI_REGRESSION`` asks for one) and the module of its independent reference values.

The ``build_harness`` fixture (``spec_decode_ci.pytest_plugin``) serves a harness of any registered backend
from its options: ``build_harness(MlaOptions(backend="FLASHMLA"))``, ``build_harness(BuilderOptions(), gpu)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from spec_decode_ci.buildpath.harness import BuildHarnessBase
from spec_decode_ci.emulation import EmulatedGpu
from spec_decode_ci.flashinfer.builder import BuilderOptions
from spec_decode_ci.mla.builder import MlaOptions


@dataclass(frozen=True)
class Backend:
    name: str
    options: type  # a frozen dataclass whose defaults describe the backend's usual builder
    harness: Callable[[Any, EmulatedGpu], BuildHarnessBase]  # (options, emulated GPU) -> harness
    reference: str  # the module of independent reference values its equality tests compare with


def _flashinfer(options: BuilderOptions, gpu: EmulatedGpu) -> BuildHarnessBase:
    from spec_decode_ci.buildpath import regressions
    from spec_decode_ci.flashinfer.harness import BuildHarness

    return BuildHarness(options, gpu, module=regressions.requested())


def _mla(options: MlaOptions, gpu: EmulatedGpu) -> BuildHarnessBase:
    from spec_decode_ci.buildpath import regressions
    from spec_decode_ci.mla.builder import backend_class
    from spec_decode_ci.mla.harness import MlaBuildHarness

    copies = regressions.requested_mla_backend(backend_class(options.backend, gpu).get_builder_cls())
    backend_module, common_module = copies or (None, None)
    return MlaBuildHarness(options, gpu, backend_module=backend_module, common_module=common_module)


BACKENDS: dict[str, Backend] = {b.name: b for b in [
    Backend("flashinfer", BuilderOptions, _flashinfer, "spec_decode_ci.flashinfer.reference"),
    Backend("mla", MlaOptions, _mla, "spec_decode_ci.mla.reference"),
]}


def backend_for(options: Any) -> Backend:
    """The registered backend whose options ``options`` are."""
    for backend in BACKENDS.values():
        if isinstance(options, backend.options):
            return backend
    raise TypeError(f"{type(options).__name__} are no registered backend's options; registered: "
                    f"{', '.join(f'{b.name} ({b.options.__name__})' for b in BACKENDS.values())}")
