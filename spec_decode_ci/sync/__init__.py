"""Host syncs, found two ways: ``sentinel`` (on any machine, pure torch: each operation on a tensor that would
live on the GPU and needs its value on the host) and ``cuda_sites`` (on a GPU: each synchronizing CUDA operation
torch's sync debug mode reports, with its site in vLLM)."""

from __future__ import annotations

from spec_decode_ci.sync.cuda_sites import (  # noqa: F401
    CUDA_SYNC_WARNING, SyncSite, cuda_sync_sites, cuda_sync_warnings, refused_sync_site,
)
from spec_decode_ci.sync.sentinel import HostSyncSentinel, SyncEvent, outside_sentinels  # noqa: F401
