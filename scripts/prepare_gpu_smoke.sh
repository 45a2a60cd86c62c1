#!/usr/bin/env bash
# Prepares vLLM for the tiny-model GPU smoke on a machine that cannot reach a package registry (the pieces
# come from the registry here, with `pip download`; nothing binary is committed).
#
#   scripts/prepare_gpu_smoke.sh OUT_DIR [VLLM_VERSION]
#
# OUT_DIR/parts/ then holds, each piece at most 60 MB so it fits a 64 MiB transfer:
#   deps.N.tar      cp312 wheels of vLLM's runtime imports that a stock CUDA/PyTorch image lacks
#   vllm-py.tar.gz  vLLM's Python sources and small files (no compiled extension)
#   so.tar.gz.NN    vLLM's compiled ops (_C, _C_stable_libtorch, _moe_C), gzipped and split; flash-attention's
#                   .so files (150-190 MB) are left out: the FlashInfer and Triton backends do not load them
# and scripts/install_gpu_smoke.sh puts them together on the target (PYTHONPATH=/tmp/site afterwards).
# On a machine with network access none of this is needed: pip install -e '.[build-path]' vllm==VERSION.
set -euo pipefail
out=$(mkdir -p "${1:?usage: $0 OUT_DIR [VLLM_VERSION]}" && cd "$1" && pwd)
version=${2:-0.21.0}
rm -rf "$out/wheels" "$out/parts"  # tar -r below appends: start from empty parts
mkdir -p "$out/wheels" "$out/parts"
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 --platform any -d "$out/wheels" "$@"
}
download "vllm==$version"
# vLLM's runtime imports missing from a stock CUDA + PyTorch 2.11 image (measured with -X importtime on the
# LLM path); flashinfer-cubin (TRTLLM cubins, 295 MB) and the CUTLASS DSL are not needed there.
download flashinfer-python==0.6.8.post1 apache-tvm-ffi==0.1.9 nvidia-cudnn-frontend==1.18.0 \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  pydantic-extra-types==2.11.1 pycountry==26.2.16 email-validator==2.4.0 \
  fastapi==0.165.0 starlette==1.10.0 python-multipart==0.0.34 sniffio==1.3.1 \
  openai==3.57.0 httpx2==2.16.2 httpcore2 truststore jiter==0.19.0 distro openai-harmony==0.0.8 msgspec==0.23.0 pyzmq==27.3.0 cbor2==6.3.0 pybase64==1.5.1 \
  gguf==0.19.0 mistral_common==1.13.1 partial-json-parser==0.2.1.1.post7 llguidance==1.3.0 \
  cachetools==8.0.2 blake3 dill==0.4.1 fastsafetensors==0.5.0 jsonschema==4.26.0 \
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
  opentelemetry-semantic-conventions-ai==0.5.1 compressed-tensors depyf==0.20.0 diskcache==5.6.3 lark==1.2.2 \
  outlines_core==0.2.14 lm-format-enforcer==0.11.3 prometheus-fastapi-instrumentator watchfiles \
  python-json-logger ijson setproctitle interegular xgrammar==0.2.5.post1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && python3 -m zipfile -e "$(ls "$out"/wheels/vllm-"$version"-*.whl)" vllm-whl)
rm -f "$out"/wheels/vllm-"$version"-*.whl
site="$work/vllm-whl"
rm -rf "$site"/vllm/vllm_flash_attn/*.so "$site"/vllm/_flashmla*.so "$site"/vllm/third_party/deep_gemm/_C.cpython-3{10,11,13,14}-*.so
(cd "$site" && find vllm -name '*.so' | sort > "$work/so-files" && tar -czf "$work/so.tar.gz" -T "$work/so-files" \
  && xargs rm -f < "$work/so-files" && tar -czf "$out/parts/vllm-py.tar.gz" .)
split -b 60m -d "$work/so.tar.gz" "$out/parts/so.tar.gz."
# wheels into tar files of at most 60 MB each: deps.0.tar, deps.1.tar, ...
part=0 size=0
for whl in $(ls -S "$out"/wheels/*.whl); do
  bytes=$(stat -c %s "$whl")
  if [ $((size + bytes)) -gt $((60 * 1024 * 1024)) ] && [ $size -gt 0 ]; then part=$((part + 1)); size=0; fi
  tar -rf "$out/parts/deps.$part.tar" -C "$out" "wheels/$(basename "$whl")"
  size=$((size + bytes))
done
rm -rf "$out/wheels"
ls -la "$out/parts"
