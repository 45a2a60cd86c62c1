"""spec-decode-ci: a CI regression harness for vLLM speculative decoding on Blackwell.

Modules: ``sync`` (host-sync sentinel, pure torch), ``emulation`` (emulated platforms), ``flashinfer``
(builder and batch factories, reference, poisoning, build harness), ``e2e`` (engine runner, cases, checks,
tiny models), ``compat`` (differences between vLLM releases), ``capabilities`` (which matrix device this is),
``results`` (the results file of a run), ``report`` (``spec-decode-ci report``), ``pytest_plugin`` (opt-in: ``-p spec_decode_ci.pytest_plugin``), ``generator`` (``generate-pipeline``) and
``suites`` (the test modules the CI steps run).
"""

__version__ = "0.3.0"
