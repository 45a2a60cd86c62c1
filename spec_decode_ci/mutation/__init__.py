"""Mutation testing of the build path: operator mutants of the functions each ``Backend`` record names
(``mutated``), the build-path tier run against a copy of vLLM's module with each, the kill rate, and the mutants
that no behaviour can tell apart from vLLM's code, one registry with a reason each.

- ``operators``: the mutants of a module's source (pure: syntax trees in, mutants out);
- ``mutants``: this vLLM's mutants of each backend, by name, as the tier's copy of a module asks for them;
- ``equivalent``: the registry of equivalent mutants;
- ``run``: the tier against each mutant, the score, the survivors (``python -m spec_decode_ci.mutation``).
"""
