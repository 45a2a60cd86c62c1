"""The one device table: how ci-infra routes a test-area step's `device` to an agent queue, and which vLLM image
it runs the step in (``_get_step_plugin`` / ``get_image``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Image:
    """A vLLM CI image: the image-build step that makes it and what a suite can rely on inside it."""

    name: str
    build_step: str
    provides: frozenset[str]


# What suites may say they need (``suites.<name>.needs`` in the matrix).
NEEDS = ("cuda", "flashinfer", "rocm")
CUDA_IMAGE = Image("vLLM's CUDA image (docker/Dockerfile, FlashInfer with its kernels)", "image-build",
                   frozenset({"cuda", "flashinfer"}))
CPU_IMAGE = Image("vLLM's CPU image (docker/Dockerfile.cpu: CPU torch, no FlashInfer, no CUDA Triton)",
                  "image-build-cpu", frozenset())
ROCM_IMAGE = Image("vLLM's ROCm image", "image-build-amd", frozenset({"rocm"}))
OTHER_PLATFORM_IMAGE = Image("that platform's own vLLM image", "", frozenset())
CPU_DEVICES = ("cpu", "cpu-small", "cpu-medium")
OTHER_PLATFORM_DEVICES = ("intel_cpu", "intel_hpu", "intel_gpu", "arm_cpu", "ascend_npu", "amd_cpu", "zen5")

# Test-area device string -> queue, as vllm-project/ci-infra's pipeline generator routes it.
QUEUES = {
    "b200-k8s": "b200-k8s",
    "b200": "B200",
    "h200": "H200",
    "h200_18gb": "h200_18gb",
    "h200_35gb": "h200_35gb",
    "h100": "mithril-h100-pool",
    "a100": "a100_queue",
    "cpu": "cpu_queue_premerge_us_east_1",
    "cpu-small": "small_cpu_queue_premerge",
    "cpu-medium": "medium_cpu_queue_premerge",
    "gh200": "gh200_queue",
    "intel_cpu": "intel-cpu",
    "intel_hpu": "intel-hpu",
    "intel_gpu": "intel-gpu",
    "arm_cpu": "arm-cpu",
    "ascend_npu": "ascend",
    "amd_cpu": "amd-cpu",
    "dgx-spark": "dgx-spark",
    "zen5": "amd-zen5-cpu",
}
# Devices ci-infra runs through its Kubernetes plugin rather than docker (``_get_step_plugin``, ci-infra 3e4cfe4);
# ci-infra refuses `automatic_shard` on them.
KUBERNETES_DEVICES = ("h100", "a100", "b200-k8s")
AMD_GPU_FAMILIES = ("mi250", "mi300", "mi325", "mi355")
SINGLE_GPU_QUEUE, MULTI_GPU_QUEUE = "gpu_1_queue", "gpu_4_queue"


def _amd_gpu(device: str) -> bool:
    return device.partition("_")[0] in AMD_GPU_FAMILIES


def image_for(device: str | None) -> Image:
    """The image ci-infra runs a step on this device string in: CPU devices get the CPU image, AMD GPUs the ROCm
    image, other platforms their own, every other (NVIDIA) device the CUDA image."""
    if device in CPU_DEVICES:
        return CPU_IMAGE
    if device in OTHER_PLATFORM_DEVICES:
        return OTHER_PLATFORM_IMAGE
    if device and _amd_gpu(device):
        return ROCM_IMAGE
    return CUDA_IMAGE


def queue_for(device: str | None, num_devices: int | None = None) -> str:
    """The queue ci-infra sends a step with this device string (and GPU count) to."""
    if device in QUEUES:
        return QUEUES[device]
    if device and _amd_gpu(device) and device.partition("_")[2] in {"1", "2", "4", "8"}:
        return f"amd_{device}"
    return MULTI_GPU_QUEUE if num_devices in (2, 4) else SINGLE_GPU_QUEUE
