"""Operator mutants of vLLM's builders that no behaviour of ``build()`` can tell apart from vLLM's code, each
with the one-line reason a reviewer checks against vLLM's source: unreachable on every configuration vLLM builds
for the backend, overwritten later in the same build, or a value only a hardware-boundary stand-in reads.

Keyed by ``Mutant.key`` (function, operator, before -> after, the expression a constant stands in, which
occurrence): no line numbers, so an entry holds while vLLM only moves the code. A listed mutant the tier kills
fails the mutation run (the entry went stale).
"""

from __future__ import annotations

EQUIVALENT: dict[str, str] = {
}
