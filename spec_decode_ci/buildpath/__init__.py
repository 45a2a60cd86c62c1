"""The build-path tier's shared core: batches, running a build under the host-sync sentinel, plan-call records,
persistent-buffer discovery and poisoning, phase splits, the self-check's regressed copies of vLLM's modules and
one harness base. The attention backends (``spec_decode_ci.flashinfer``, ``spec_decode_ci.mla``) are built on it
and never import each other; ``spec_decode_ci.backends`` registers them."""
