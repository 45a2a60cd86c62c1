"""End-to-end tier: cases, engine runner, checks, tiny models."""
