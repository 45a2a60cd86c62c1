"""The one device -> Buildkite queue table: how ci-infra routes a test-area step's `device` to an agent queue."""

from __future__ import annotations

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
AMD_GPU_FAMILIES = ("mi250", "mi300", "mi325", "mi355")
SINGLE_GPU_QUEUE, MULTI_GPU_QUEUE = "gpu_1_queue", "gpu_4_queue"


def queue_for(device: str | None, num_devices: int | None = None) -> str:
    """The queue ci-infra sends a step with this device string (and GPU count) to."""
    if device in QUEUES:
        return QUEUES[device]
    if device:
        family, _, count = device.partition("_")
        if family in AMD_GPU_FAMILIES and count in {"1", "2", "4", "8"}:
            return f"amd_{device}"
    return MULTI_GPU_QUEUE if num_devices in (2, 4) else SINGLE_GPU_QUEUE
