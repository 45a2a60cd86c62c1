#!/usr/bin/env bash
# Carries the kernels a first vLLM engine compiles (FlashInfer's JIT ops, Triton's kernels) from one machine to a
# fresh one, so that the first engine there loads them instead of compiling (~200 s on an H200), and torch.compile's
# caches (vLLM's compiled graphs by its own config hash, Inductor's FX-graph cache), so that an engine with CUDA
# graphs on skips compiling its model. It carries vLLM's model-info cache too: without it, each engine whose architecture is new to the machine inspects the model class
# in a subprocess that imports vLLM again (~18 s on an H200). vLLM keys each entry by its model file's hash.
#
#   scripts/kernel_cache.sh save FILE   after an engine ran: FlashInfer's and Triton's caches and their key
#   scripts/kernel_cache.sh load FILE   before the first engine: restored only where the key matches this machine
#
# The key is what the kernels were built for: FlashInfer's version, torch's version and CUDA, the GPU's compute
# capability. FlashInfer keys its own directory by its version and the GPU arch too, and re-runs ninja on every
# load: ninja rebuilds an op whose inputs are newer than it, and a fresh install writes them now. The ops are
# built from FlashInfer's own sources and apache-tvm-ffi's headers (`-isystem` in each op's build.ninja), so
# `load` dates both packages back to the epoch (the same files the ops were built from: same versions). Dating
# back FlashInfer alone was not enough: ninja then rebuilt every op for tvm_ffi's device_guard.h.
# PYTHONPATH must reach FlashInfer as the engine will (e.g. /tmp/site).
set -euo pipefail
action=${1:?usage: scripts/kernel_cache.sh save|load FILE}
file=${2:?usage: scripts/kernel_cache.sh save|load FILE}
fi_base=${FLASHINFER_WORKSPACE_BASE:-$HOME}
triton_dir=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
vllm_cache=${VLLM_CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm}  # vLLM's envs.VLLM_CACHE_ROOT
modelinfo_dir=$vllm_cache/modelinfos
compile_dir=$vllm_cache/torch_compile_cache
inductor_dir=${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(id -un)}  # torch._inductor's default
key=$(python3 -c 'import flashinfer, torch
major, minor = torch.cuda.get_device_capability()
print(f"flashinfer={flashinfer.__version__} torch={torch.__version__} cuda={torch.version.cuda} sm={major}{minor}")')
case "$action" in
  save)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "$key" > "$work/KEY"
    mkdir -p "$work/flashinfer" "$work/triton" "$work/modelinfos" "$work/compile" "$work/inductor"
    [ -d "$fi_base/.cache/flashinfer" ] && cp -a "$fi_base/.cache/flashinfer/." "$work/flashinfer/"
    [ -d "$triton_dir" ] && cp -a "$triton_dir/." "$work/triton/"
    [ -d "$modelinfo_dir" ] && cp -a "$modelinfo_dir/." "$work/modelinfos/"
    [ -d "$compile_dir" ] && cp -a "$compile_dir/." "$work/compile/"
    [ -d "$inductor_dir" ] && cp -a "$inductor_dir/." "$work/inductor/"
    tar -czf "$file" -C "$work" KEY flashinfer triton modelinfos compile inductor
    echo "saved kernel cache for [$key]: $(du -h "$file" | cut -f1)"
    ;;
  load)
    saved=$(tar -xzf "$file" -O KEY)
    if [ "$saved" != "$key" ]; then
      echo "kernel cache not used: built for [$saved], this machine is [$key]"
      exit 0
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    tar -xzf "$file" -C "$work"
    mkdir -p "$fi_base/.cache/flashinfer" "$triton_dir" "$modelinfo_dir"
    cp -a "$work/flashinfer/." "$fi_base/.cache/flashinfer/"
    cp -a "$work/triton/." "$triton_dir/"
    [ -d "$work/modelinfos" ] && cp -a "$work/modelinfos/." "$modelinfo_dir/"
    [ -d "$work/compile" ] && mkdir -p "$compile_dir" && cp -a "$work/compile/." "$compile_dir/"
    [ -d "$work/inductor" ] && mkdir -p "$inductor_dir" && cp -a "$work/inductor/." "$inductor_dir/"
    for package in flashinfer tvm_ffi; do
      dir=$(python3 -c "import $package, os; print(os.path.dirname($package.__file__))")
      find "$dir" -exec touch -h -d @0 {} +
    done
    echo "kernel cache loaded for [$key]"
    ;;
  *) echo "usage: scripts/kernel_cache.sh save|load FILE" >&2; exit 2 ;;
esac
