"""Fixtures for the generator's own tests: run the CLI in-process against files in a temporary repo."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pytest

from spec_decode_ci.generator.cli import main

DATA = Path(__file__).parent / "data"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(*argv: str, environ: dict[str, str] | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv), environ or {})
        except SystemExit as exc:  # argparse's --help / usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return Result(code, out.getvalue(), err.getvalue())


@lru_cache(maxsize=1)
def buildkite_schema() -> dict:
    """Buildkite's official pipeline schema, as check-jsonschema vendors it."""
    source = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("buildkite.json")
    return json.loads(source.read_text(encoding="utf-8"))


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def repo_matrix_text() -> str:
    return (REPO_ROOT / "hardware_matrix.yaml").read_text(encoding="utf-8")


@pytest.fixture
def tricky_matrix(tmp_path: Path) -> Path:
    path = tmp_path / "hardware_matrix.yaml"
    shutil.copy(DATA / "tricky_matrix.yaml", path)
    return path
