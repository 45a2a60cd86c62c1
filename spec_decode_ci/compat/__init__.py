"""What differs between the vLLM releases the harness supports: one function per difference, named for it,
in the module of the part of vLLM that changed.

Each function probes the installed vLLM's code (a signature, a dataclass field, a module), never its version
string, and is registered with the first release where the newer form appears (``DIFFERENCES``). Where neither
the old nor the new form is present, it raises ``MissingVllmField`` naming what it looked for: a rename in a
future vLLM then fails loudly here instead of dropping out of a check.

- ``probes``: the supported releases, ``@difference`` and its registry, ``MissingVllmField``, lookups;
- ``flashinfer``: the FlashInfer backend (TRTLLM availability and metadata, decode queries, decode context parallel);
- ``mla``: the MLA builders;
- ``model_runners``: vLLM's GPU model runners and how each pads a batch to a CUDA-graph size;
- ``engine``: configuration, common metadata, the GPU worker, vLLM's own GPU sync check.

Adding a vLLM release: a function for each new difference, with its ``since`` release, in the module of what
changed; callers reach it here as ``compat.<name>``, and the native pipeline's compatibility lane
(``compat_lane_releases``) then runs the tier on it.
"""

from __future__ import annotations

# Every public name of the modules, as compat.<name>: a difference is added in its module alone.
from spec_decode_ci.compat.probes import *  # noqa: F401,F403
from spec_decode_ci.compat.probes import _version_key  # noqa: F401
from spec_decode_ci.compat.flashinfer import *  # noqa: F401,F403
from spec_decode_ci.compat.mla import *  # noqa: F401,F403
from spec_decode_ci.compat.model_runners import *  # noqa: F401,F403
from spec_decode_ci.compat.engine import *  # noqa: F401,F403
from spec_decode_ci.compat import engine, flashinfer, mla, model_runners, probes  # noqa: F401,E402
