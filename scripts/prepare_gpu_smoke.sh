#!/usr/bin/env bash
# Prepares a vLLM release for the tiny-model GPU smoke on a machine that cannot reach a package registry (the
# pieces come from the registry here, with `pip download`; nothing binary is committed).
#
#   scripts/prepare_gpu_smoke.sh OUT_DIR RELEASE HAVE_FILE
#
# HAVE_FILE is the GPU machine's `python3 -m pip list --format=freeze`. The wheels carried are what RELEASE's own
# requirements need there (scripts/smoke_pieces.py: the release wheel's Requires-Dist, transitively, less what
# the machine's installed versions satisfy), without WITHOUT below. OUT_DIR/parts/ then holds, each piece at most
# 60 MB so it fits a 64 MiB transfer:
#   deps.N.tar      those wheels
#   vllm-py.tar.gz  vLLM's Python sources and small files (no compiled extension)
#   so.tar.gz.NN    vLLM's compiled ops (_C, _moe_C, ...), gzipped and split; flash-attention's .so files
#                   (150-300 MB) are left out: the FlashInfer and Triton backends do not load them
# and scripts/install_gpu_smoke.sh puts them together on the target (PYTHONPATH=/tmp/site afterwards).
# On a machine with network access none of this is needed: pip install -e '.[build-path]' vllm==RELEASE.
set -euo pipefail
usage="usage: $0 OUT_DIR RELEASE HAVE_FILE"
out=$(mkdir -p "${1:?$usage}" && cd "$1" && pwd)
version=${2:?$usage}
have=$(cd "$(dirname "${3:?$usage}")" && pwd)/$(basename "$3")
here=$(cd "$(dirname "$0")" && pwd)
# Packages of kernels and media the tiny-model smoke never loads, each tens of MB: the CUTLASS DSL, tilelang,
# tokenspeed's MLA kernels with their own Triton, humming's kernels with nvcc, the video and audio decoders.
# numba: the machine's own version serves (vLLM imports it for the n-gram drafter only).
WITHOUT=(nvidia-cutlass-dsl tilelang tokenspeed-mla humming-kernels PyNvVideoCodec torchcodec numba)
rm -rf "$out/wheels" "$out/parts"  # tar -r below appends: start from empty parts
mkdir -p "$out/wheels" "$out/parts"
python3 "$here/smoke_pieces.py" "$out/wheels" "$version" "$have" "${WITHOUT[@]/#/--without=}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && python3 -m zipfile -e "$(ls "$out"/wheels/vllm-"$version"-*.whl)" vllm-whl)
rm -f "$out"/wheels/vllm-"$version"-*.whl
site="$work/vllm-whl"
# flash-attention's and FlashMLA's kernels, deep_gemm's builds for other Pythons, the Rust frontend binary
# (LLM() runs the Python engine): none is loaded by the smoke.
rm -rf "$site"/vllm/vllm_flash_attn/*.so "$site"/vllm/_flashmla*.so "$site"/vllm/vllm-rs \
  "$site"/vllm/third_party/deep_gemm/_C.cpython-3{10,11,13,14}-*.so
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
