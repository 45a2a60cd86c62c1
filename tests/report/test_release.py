"""The release: the sdist and wheel build from the checkout and pass ``twine check``; the wheel, installed into a
fresh virtual environment, runs its plugin and the report there; the release pipeline is one Buildkite accepts
and publishes only from a tag naming the version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from spec_decode_ci import __version__
from spec_decode_ci.capabilities import find_checkout
from tests.generator.conftest import buildkite_schema

REPO = find_checkout()
pytestmark = pytest.mark.skipif(REPO is None, reason="needs the spec-decode-ci checkout (the release builds from it)")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_sdist_and_wheel_carry_the_version_and_pass_twine_check(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert names == [f"spec_decode_ci-{__version__}-py3-none-any.whl", f"spec_decode_ci-{__version__}.tar.gz"]
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_wheel_runs_its_plugin_and_report_in_a_fresh_environment(dist, tmp_path):
    proc = subprocess.run([str(REPO / "scripts" / "check_wheel.sh"), str(dist), str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    python = tmp_path / "venv" / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import spec_decode_ci; print(spec_decode_ci.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
    assert where.stdout.startswith(str(tmp_path / "venv")), where  # the installed wheel, not the checkout
    data = json.loads((tmp_path / "results.json").read_text())
    outcomes = {c["test"].split("::")[-1]: c["outcome"] for case in data["cases"] for c in case["checks"]}
    assert outcomes == {"test_passes": "passed", "test_fails": "failed"}
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("### spec-decode-ci: red") and "AssertionError: red on purpose" in text


def test_the_release_pipeline_is_valid_buildkite_and_publishes_only_on_a_version_tag():
    pipeline = yaml.safe_load((REPO / ".buildkite" / "release.yml").read_text())
    jsonschema.validate(pipeline, buildkite_schema())
    build, publish = pipeline["steps"]
    assert "python -m twine check --strict dist/*" in build["commands"]
    assert publish["depends_on"] == build["key"] and publish["if"].startswith("build.tag =~")
    assert publish["commands"][-1] == "scripts/publish_release.sh dist"


@pytest.mark.parametrize("tag, says", [("v0.0.1", "does not name the version"), (None, "only for a tagged build")])
def test_publishing_refuses_a_tag_that_is_not_the_version(tmp_path, tag, says):
    (tmp_path / f"spec_decode_ci-{__version__}-py3-none-any.whl").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "BUILDKITE_TAG"}
    if tag:
        env["BUILDKITE_TAG"] = tag
    proc = subprocess.run([str(REPO / "scripts" / "publish_release.sh"), str(tmp_path)], capture_output=True,
                          text=True, env=env)
    assert proc.returncode != 0 and says in proc.stderr
