"""Pipeline generator for vLLM speculative-decoding CI: hardware_matrix.yaml -> Buildkite steps."""
