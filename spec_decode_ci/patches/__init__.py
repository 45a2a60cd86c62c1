"""One registry of deliberate changes to vLLM's source for the self-checks, one record each (``PATCHES``).

A ``Patch`` edits one vLLM module's source once (a regular expression and its replacement) and names the suite
modules that must turn red with it, and which of their tests. The CPU self-check (``buildpath.regressions``,
``selfcheck == "cpu"``) compiles a private copy of the module with it and runs the build-path tier against the
copy; the GPU self-check (``e2e.gpu_breaks``, ``selfcheck == "gpu"``) loads the copy in place of the module
before vLLM imports it and runs an e2e suite. vLLM's installed files are never written. A patch whose code is
gone from the installed vLLM is the harness's breakage (``PatchDoesNotApply``), not a finding.

- ``record``: the ``Patch`` record and how it is applied;
- ``build_path_regressions``: the CPU self-check's regressions of the metadata builders;
- ``e2e_breaks``: the GPU self-check's breaks of vLLM's speculative decoding.
"""

from __future__ import annotations

from spec_decode_ci.patches.record import (  # noqa: F401
    E2E_SUITES, FLASHINFER, MLA_COMMON, TIER, Patch, PatchDoesNotApply, apply, gpu_break, regression, source_contains,
)
from spec_decode_ci.patches.build_path_regressions import PR_39546, REGRESSIONS, closest_to_pr_39546  # noqa: F401
from spec_decode_ci.patches.e2e_breaks import GPU_BREAKS  # noqa: F401

PATCHES = {**REGRESSIONS, **GPU_BREAKS}
