#!/usr/bin/env bash
# scripts/package_layout.sh DEST: the installed package's layout (spec_decode_ci with .generator, .pipelines and
# .suites) made of symlinks into this checkout, for a machine that cannot build or install it. Then, from a
# directory outside the checkout: PYTHONPATH=DEST python -m pytest -p spec_decode_ci.pytest_plugin --pyargs ...
set -euo pipefail
dest=${1:?usage: scripts/package_layout.sh DEST}
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest/spec_decode_ci"
mkdir -p "$dest/spec_decode_ci"
for entry in "$root"/spec_decode_ci/*; do ln -s "$entry" "$dest/spec_decode_ci/"; done
ln -s "$root/generator" "$dest/spec_decode_ci/generator"
ln -s "$root/pipelines" "$dest/spec_decode_ci/pipelines"
ln -s "$root/tests/spec_decode" "$dest/spec_decode_ci/suites"
echo "spec_decode_ci laid out under $dest (matrix: $root/hardware_matrix.yaml)"
