#!/usr/bin/env bash
# On the GPU machine: PARTS=<folder with the parts of prepare_gpu_smoke.sh> scripts/install_gpu_smoke.sh
# Installs everything under /tmp/site; then run with PYTHONPATH=/tmp/site:. (see README, "GPU smoke").
set -euo pipefail
parts=${PARTS:?set PARTS to the folder holding deps.tar, vllm-py.tar.gz and so.tar.gz.NN}
mkdir -p /tmp/site /tmp/smoke-wheels
tar -xf "$parts/deps.tar" -C /tmp/smoke-wheels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  /tmp/smoke-wheels/wheels/*.whl
tar -xzf "$parts/vllm-py.tar.gz" -C /tmp/site
cat "$parts"/so.tar.gz.* | tar -xz -C /tmp/site
echo "installed under /tmp/site"
