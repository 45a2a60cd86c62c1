"""Builder factory: vLLM's real MLA metadata builders on a real ``VllmConfig`` and ``MLAAttentionSpec``.

The config comes from ``EngineArgs.create_engine_config()`` on a tiny local DeepSeek-V3 ``config.json`` with an
MTP layer, speculating with ``method="mtp"``, so MLA, the reorder threshold (1 + k) and the prefill backend are
vLLM's own choices for a DeepSeek-style MTP deployment on the emulated GPU.
"""

from __future__ import annotations

import math
import sys
import dataclasses
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import torch

from spec_decode_ci import compat
from spec_decode_ci.tiny_configs import write_mla_target
from spec_decode_ci.emulation import BLACKWELL, EmulatedGpu, GpuAllocationsOnHost, emulated_platform
from spec_decode_ci.buildpath.options import SpecDecodeOptions
from spec_decode_ci.buildpath.run import builder_device

LAYER_NAME = "model.layers.0.self_attn.attn"


@dataclass(frozen=True)
class MlaOptions(SpecDecodeOptions):
    backend: str = "FLASHINFER_MLA"  # an AttentionBackendEnum name
    num_heads: int = 16
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    page_size: int = 0  # 0: the backend's first supported kernel block size
    kv_cache_dtype: str = "auto"  # "auto": the model's dtype (bf16)
    # The layer flattens a non-causal query block into decode rows (a DFlash-style drafter's attention group).
    non_causal_multi_token_decode: bool = False

    @property
    def dims(self) -> dict[str, int]:
        return {"kv_lora_rank": self.kv_lora_rank, "qk_nope_head_dim": self.qk_nope_head_dim,
                "qk_rope_head_dim": self.qk_rope_head_dim, "v_head_dim": self.v_head_dim}


def backend_class(name: str, gpu: EmulatedGpu = BLACKWELL):
    """The backend class registered under ``name``, its module imported on the emulated ``gpu`` (raises
    ImportError where the module cannot load here)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    with emulated_platform(gpu), GpuAllocationsOnHost():
        return AttentionBackendEnum[name].get_class()


def page_size_of(options: MlaOptions) -> int:
    if options.page_size:
        return options.page_size
    sizes = backend_class(options.backend).get_supported_kernel_block_sizes()
    first = sizes[0] if sizes else 64
    return first if isinstance(first, int) else first.base


def _module_missing(name: str, exc: BaseException) -> compat.MissingVllmField | None:
    """The harness's breakage where a backend on vLLM's list names a module or class that does not exist (None:
    its module exists, and what failed is something it loads)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    module, cls = AttentionBackendEnum[name].get_path().rsplit(".", 1)
    gone = isinstance(exc, ModuleNotFoundError) and exc.name and (module + ".").startswith(exc.name + ".")
    if gone or (isinstance(exc, AttributeError) and cls in str(exc)):
        return compat.MissingVllmField(module, cls, f"MLA backend {name} on vLLM's priority list",
                                       detail=f"{module}.{cls} of MLA backend {name} does not exist ({exc})")
    return None


def sm100_dense_backends(gpu: EmulatedGpu = BLACKWELL) -> list[tuple[str, str | compat.MissingVllmField | None]]:
    """Each dense MLA backend vLLM's platform would try for a DeepSeek-style model on ``gpu``, in its order,
    with the reason it cannot be tested here (None when it can; a ``MissingVllmField`` where vLLM lists a
    backend whose module is gone: the harness's breakage, which its tests raise)."""
    from vllm.platforms.interface import DeviceCapability
    from vllm.triton_utils import HAS_TRITON

    found = []
    for name in backend_priorities(gpu.capability):
        try:
            cls = backend_class(name, gpu)
        except (ImportError, AttributeError) as exc:
            found.append((name, _module_missing(name, exc) or "a compiled kernel library its module needs cannot "
                                                               f"load on this machine (hardware boundary): {exc}"))
            continue
        if cls.is_sparse():
            continue
        builder_module = sys.modules[cls.get_builder_cls().__module__]
        if not HAS_TRITON and ("triton" in vars(builder_module) or "tl" in vars(builder_module)):
            found.append((name, "its builder runs Triton code, and Triton has no build for this machine"))
            continue
        if not cls.supports_compute_capability(DeviceCapability(*gpu.capability)):
            found.append((name, f"not supported on sm{gpu.capability[0]}{gpu.capability[1]}"))
            continue
        found.append((name, _kernels_missing_here(cls, MlaOptions(backend=name), gpu)))
    return found


def _kernels_missing_here(cls: type, options: MlaOptions, gpu: EmulatedGpu) -> str | None:
    """On a GPU the backend's real kernels run: why vLLM says the backend cannot run on this install and the
    emulated GPU (a compiled extension it needs is absent, a kernel family it lacks), else None. On a CPU the
    harness stands in for its kernels. Asked as vLLM asks it: under the platform and a current config."""
    import inspect

    from vllm.platforms.interface import DeviceCapability

    check = getattr(cls, "supports_combination", None)
    if not torch.cuda.is_available() or check is None:
        return None
    values = dict(head_size=576, dtype=torch.bfloat16, kv_cache_dtype=None, block_size=64, use_mla=True,
                  has_sink=False, use_sparse=False, use_mm_prefix=False,
                  device_capability=DeviceCapability(*gpu.capability))
    params = inspect.signature(check).parameters
    if not set(params) <= set(values):
        return None
    with builder_context(vllm_config(options, gpu), gpu):
        reason = check(**{k: values[k] for k in params})
    return f"vLLM says it cannot run here: {reason}" if reason else None


def kv_cache_dtype_of(options: MlaOptions) -> str:
    """The options' KV-cache dtype if the backend takes it, else the first the backend takes (some SM100 MLA
    kernels exist only for an FP8 cache)."""
    supported = list(backend_class(options.backend).supported_kv_cache_dtypes)
    return options.kv_cache_dtype if options.kv_cache_dtype in supported else supported[0]


def vllm_config(options: MlaOptions, gpu: EmulatedGpu = BLACKWELL):
    """vLLM's config for the options' tiny DeepSeek-V3 with MTP; one per shape, whatever the backend."""
    shape = dataclasses.replace(options, backend="", page_size=page_size_of(options),
                                kv_cache_dtype=kv_cache_dtype_of(options))
    return _vllm_config(shape, gpu)


@lru_cache(maxsize=None)
def _vllm_config(options: MlaOptions, gpu: EmulatedGpu):
    from spec_decode_ci.model_info import engine_config

    with tempfile.TemporaryDirectory(prefix="spec-decode-ci-mla-") as base, emulated_platform(gpu):
        model_dir = write_mla_target(Path(base) / "tiny-deepseek-mtp", options.max_model_len,
                                     heads=options.num_heads, **options.dims)
        kwargs = options.engine_kwargs(model_dir, options.page_size, {"method": "mtp"})
        config = engine_config("build_path", **kwargs, kv_cache_dtype=options.kv_cache_dtype)
    if not config.model_config.use_mla:
        raise compat.MissingVllmField("vllm.config.ModelConfig", "use_mla",
                                      "the tiny DeepSeek-V3 config did not give an MLA model config")
    return config


@dataclass
class AttentionLayerView:
    """The model's MLA attention layer as the builder reads it from the forward context: its latent dimensions
    and the prefill backend vLLM selects (a real one). No model is loaded here, and the real layer's kernel
    implementation allocates GPU workspaces when it is made."""

    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    prefill_backend: Any
    non_causal_multi_token_decode: bool = False
    dcp_manager: Any = None


@contextmanager
def builder_context(config, gpu: EmulatedGpu, *copies) -> Iterator[None]:
    """``config`` current on the emulated ``gpu``; ``copies``: the self-check's module copies (None: none)."""
    from vllm.config import set_current_vllm_config

    with ExitStack() as stack:
        stack.enter_context(emulated_platform(gpu, extra_modules=tuple(m for m in copies if m is not None)))
        stack.enter_context(set_current_vllm_config(config))
        yield


def make_builder(options: MlaOptions, gpu: EmulatedGpu = BLACKWELL, backend_module=None,
                 device: torch.device | None = None, common_module=None):
    """A real MLA metadata builder of ``options.backend``; with ``backend_module`` (the self-check), the class of
    the same name from that copy of its module, built on a regressed copy of vLLM's common MLA module."""
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    device = device or builder_device()
    config = vllm_config(options, gpu)
    builder_cls = backend_class(options.backend, gpu).get_builder_cls()
    if backend_module is not None:
        builder_cls = getattr(backend_module, builder_cls.__name__)
    init_workspace_manager(device)
    with builder_context(config, gpu, backend_module, common_module):
        scale = 1.0 / math.sqrt(options.qk_nope_head_dim + options.qk_rope_head_dim)
        layer = AttentionLayerView(options.num_heads, None, **options.dims, prefill_backend=compat.mla_prefill_backend(
            config, options.num_heads, scale, options.dims),
            non_causal_multi_token_decode=options.non_causal_multi_token_decode)
        config.compilation_config.static_forward_context[LAYER_NAME] = layer
        kv_dtype = kv_cache_dtype_of(options)
        spec = MLAAttentionSpec(block_size=page_size_of(options), num_kv_heads=1,
                                head_size=options.kv_lora_rank + options.qk_rope_head_dim,
                                dtype=torch.bfloat16 if kv_dtype == "auto" else torch.uint8, cache_dtype_str=kv_dtype)
        return builder_cls(spec, [LAYER_NAME], config, device)


@compat.probe
def backend_priorities(capability: tuple[int, int]) -> list[str]:
    """The attention backends vLLM's CUDA platform tries, in order, for an MLA model on a GPU of ``capability``.

    Read from ``vllm.platforms.cuda._get_backend_priorities``, compiled alone from its source: that module loads
    the CUDA driver on import, so it cannot be imported where there is no GPU."""
    import ast
    import importlib.util

    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    spec = importlib.util.find_spec("vllm.platforms.cuda")
    source = open(spec.origin).read()
    found = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities"]
    if not found:
        raise compat.MissingVllmField("vllm.platforms.cuda", "_get_backend_priorities", "MLA backend priorities",
                               detail=f"{spec.origin} has no _get_backend_priorities")
    function = found[0]
    function.decorator_list = []
    namespace: dict[str, Any] = {"AttentionBackendEnum": AttentionBackendEnum, "DeviceCapability": DeviceCapability,
                                 "CacheDType": str}
    exec(compile(ast.Module([function], type_ignores=[]), spec.origin, "exec"), namespace)
    # kv_cache_dtype None: a bf16 cache, the default, so no quantized-cache branch is taken.
    return [b.name for b in namespace["_get_backend_priorities"](True, DeviceCapability(*capability))]


@compat.probe
def init_workspace_manager(device) -> None:
    """vLLM's per-process workspace manager, which the GPU runner sets up and MLA prefill backends draw from."""
    try:
        from vllm.v1.worker import workspace
    except ImportError:
        return
    if not workspace.is_workspace_manager_initialized():
        workspace.init_workspace_manager(device)
