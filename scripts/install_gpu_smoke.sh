#!/usr/bin/env bash
# On the GPU machine: PARTS=<folder with the parts of prepare_gpu_smoke.sh> scripts/install_gpu_smoke.sh
# Installs everything under /tmp/site; then run with PYTHONPATH=/tmp/site:. (see README, "GPU smoke").
set -euo pipefail
parts=${PARTS:?set PARTS to the folder holding deps.N.tar, vllm-py.tar.gz and so.tar.gz.NN}
mkdir -p /tmp/site /tmp/smoke-wheels
for t in "$parts"/deps.*.tar; do tar -xf "$t" -C /tmp/smoke-wheels; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  /tmp/smoke-wheels/wheels/*.whl
tar -xzf "$parts/vllm-py.tar.gz" -C /tmp/site
cat "$parts"/so.tar.gz.* | tar -xz -C /tmp/site
# flash-attention's kernels (150-190 MB) were left behind; vLLM imports the module at start-up even when the
# FlashInfer backend is used. This marker satisfies that import; any call into torch.ops._vllm_fa2_C fails.
if ! ls /tmp/site/vllm/vllm_flash_attn/_vllm_fa*_C*.so >/dev/null 2>&1; then
  echo '"""Not installed: flash-attention kernels were not carried here (FlashInfer backend only)."""' \
    > /tmp/site/vllm/vllm_flash_attn/_vllm_fa2_C.py
fi
echo "installed under /tmp/site"
