"""SpotQuota -> the spot ClusterQueue's GPU resource group (Kueue).

Why nominalQuota 0 and borrowingLimit = quota (and not nominalQuota = quota): in a cohort, the
sum of the members' nominal quotas is the capacity Kueue hands out, and a workload running within
its queue's nominal quota is never reclaimed by another queue (`reclaimWithinCohort` only preempts
workloads of queues that use more than their nominal quota). A spot queue with nominal quota would
therefore add phantom capacity to the cohort and shield spot work from the high-priority queues.
With nominalQuota 0 every admitted spot GPU is borrowed from the HP queues' unused nominal quota,
the HP queues reclaim it whenever they need it (reclaimWithinCohort: Any on the HP queues), and
borrowingLimit caps how much spot may borrow at once: GFS's forecast of what stays free for the
guaranteed duration. See docs/kueue-kai.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gfs.services.adapters.mapping import KueueClusterQueue, SpotGpus

FIELD_MANAGER = "gfs-quota-adapter"


def cluster_queue_manifest(
    queue: KueueClusterQueue, gpus_by_pool: Mapping[str, SpotGpus], *, api_version: str, gpu_resource: str
) -> dict[str, Any]:
    """The server-side-apply manifest for one spot ClusterQueue.

    `spec.resourceGroups` is an atomic list in the CRD, so the manifest states the whole list: the
    GPU group the adapter computes, then the configured extra groups verbatim. A pool absent from
    `gpus_by_pool` borrows nothing (0).
    """
    flavors = [
        {
            "name": f.flavor,
            "resources": [
                {
                    "name": gpu_resource,
                    "nominalQuota": 0,
                    "borrowingLimit": gpus_by_pool.get(f.pool, SpotGpus(0, "")).gpus,
                }
            ],
        }
        for f in queue.flavors
    ]
    groups: list[dict[str, Any]] = [{"coveredResources": [gpu_resource], "flavors": flavors}]
    groups.extend(dict(g) for g in queue.extra_resource_groups)
    return {
        "apiVersion": api_version,
        "kind": "ClusterQueue",
        "metadata": {"name": queue.name},
        "spec": {"resourceGroups": groups},
    }
