"""SpotQuota -> a spot Queue's GPU entry (KAI Scheduler, scheduling.run.ai/v2).

The spot queue gets `quota: 0` (nothing deserved, so every spot GPU is over-quota and the queues
with deserved quota reclaim it when they need it), the configured `overQuotaWeight` (its share of
idle GPUs against other over-quota queues), and `limit` = GFS's quota floored to whole GPUs: the
most GPUs the queue may hold at once. KAI counts GPUs in fractions (0.5 = half a GPU); the adapter
still writes whole GPUs, the same number the Kueue side writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gfs.services.adapters.mapping import KaiQueue, SpotGpus


def queue_manifest(
    queue: KaiQueue, gpus_by_pool: Mapping[str, SpotGpus], *, api_version: str
) -> dict[str, Any]:
    """The server-side-apply manifest for one spot Queue: only `spec.resources.gpu`, so the
    queue's parent, priority, cpu and memory stay whoever set them (they are plain object fields,
    merged per field by server-side apply)."""
    limit = gpus_by_pool.get(queue.pool, SpotGpus(0, "")).gpus
    return {
        "apiVersion": api_version,
        "kind": "Queue",
        "metadata": {"name": queue.name},
        "spec": {
            "resources": {"gpu": {"quota": 0, "overQuotaWeight": queue.over_quota_weight, "limit": limit}}
        },
    }
