#!/usr/bin/env bash
# The wheel in DIST, installed into a fresh virtual environment: its pytest plugin writes a results file of a
# small run (one passing, one failing test) and `spec-decode-ci report` turns it into the annotation's Markdown.
# Usage: scripts/check_wheel.sh DIST [WORKDIR]   (WORKDIR, kept: the environment, results.json and report.md)
set -euo pipefail
dist=$(cd "${1:?usage: scripts/check_wheel.sh DIST [WORKDIR]}" && pwd)
wheel=$(ls "$dist"/spec_decode_ci-*.whl)
if [ -n "${2:-}" ]; then
  mkdir -p "$2"; work=$(cd "$2" && pwd)
else
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fi
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "${wheel}[suites]"
cat > "$work/test_wheel_smoke.py" <<'PY'
def test_passes(record_property):
    record_property("host_syncs_per_step_max", 0)


def test_fails():
    assert 1 == 2, "red on purpose"
PY
cd "$work"
if "$work/venv/bin/python" -m pytest -q -p spec_decode_ci.pytest_plugin test_wheel_smoke.py \
    --spec-decode-results=results.json; then
  echo "check_wheel: the smoke run should have one red test" >&2; exit 1
fi
"$work/venv/bin/spec-decode-ci" report results.json --print > report.md
grep -q "test_fails" report.md || { echo "check_wheel: the report does not name the red test" >&2; exit 1; }
echo "check_wheel: $(basename "$wheel") installs, records results and reports"
