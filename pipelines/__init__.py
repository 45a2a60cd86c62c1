"""Jinja templates of the two output formats of generate-pipeline (package data)."""
