"""Harness for FlashInfer metadata builders: factories, reference, poisoning, build harness, regressions."""
