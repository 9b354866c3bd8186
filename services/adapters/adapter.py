"""The adapter's state: the latest SpotQuota per mapped pool, and the manifests it implies.

Pure (no I/O; the clock is passed in): `service` feeds it records and asks which manifests changed.
Every manifest is validated against the vendored CRD schema before it leaves, so a mapping that
would produce an object Kueue/KAI rejects fails here, loudly, not at the API server.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Literal

from gfs.schemas.quota import SpotQuota
from gfs.services.adapters import kai, kueue
from gfs.services.adapters.crd_schema import crd_for
from gfs.services.adapters.mapping import AdapterConfig, SpotGpus, spot_gpus

log = logging.getLogger(__name__)

Target = Literal["kueue", "kai"]


class QuotaAdapter:
    """Latest quota per pool in, one manifest per spot ClusterQueue / Queue out."""

    def __init__(self, config: AdapterConfig, target: Target) -> None:
        section = config.kueue if target == "kueue" else config.kai
        if section is None:
            raise ValueError(f"the config has no `{target}:` section for --target {target}")
        self.config = config
        self.target = target
        self.schema = crd_for(target, section.api_version)
        self._pools = config.pools(target)
        self._latest: dict[str, SpotQuota] = {}
        self._unknown_warned: set[str] = set()
        self._emitted: dict[str, str] = {}  # object name -> canonical JSON last handed out

    def observe(self, quota: SpotQuota) -> bool:
        """Keep `quota` if its pool is mapped and it is not older than the one held."""
        if quota.pool not in self._pools:
            if quota.pool not in self._unknown_warned:
                # Once per pool: gfs.quotas carries every pool, and most may be none of ours.
                self._unknown_warned.add(quota.pool)
                log.warning("quota for pool %s ignored: no %s mapping names it", quota.pool, self.target)
            return False
        held = self._latest.get(quota.pool)
        if held is not None and quota.valid_from < held.valid_from:
            log.info(
                "older quota for pool %s ignored (valid_from %s)", quota.pool, quota.valid_from.isoformat()
            )
            return False
        self._latest[quota.pool] = quota
        return True

    def gpus(self, now: datetime) -> dict[str, SpotGpus]:
        hours = self.config.guarantee_hours
        return {pool: spot_gpus(self._latest.get(pool), hours, now) for pool in sorted(self._pools)}

    def manifests(self, now: datetime) -> list[dict[str, Any]]:
        """Every manifest of the target as of `now`, each validated against the CRD schema."""
        by_pool = self.gpus(now)
        out: list[dict[str, Any]] = []
        if self.target == "kueue" and self.config.kueue is not None:
            for cq in self.config.kueue.cluster_queues:
                out.append(
                    kueue.cluster_queue_manifest(
                        cq,
                        by_pool,
                        api_version=self.config.kueue.api_version,
                        gpu_resource=self.config.gpu_resource,
                    )
                )
        elif self.target == "kai" and self.config.kai is not None:
            for q in self.config.kai.queues:
                out.append(kai.queue_manifest(q, by_pool, api_version=self.config.kai.api_version))
        for manifest in out:
            self.schema.validate(manifest)
        return out

    def changed(self, now: datetime) -> list[dict[str, Any]]:
        """The manifests that differ from what was last marked applied (all of them at first)."""
        return [m for m in self.manifests(now) if self._emitted.get(m["metadata"]["name"]) != _canonical(m)]

    def mark_applied(self, manifest: dict[str, Any]) -> None:
        """Record `manifest` as handed out; called only after the sink succeeded, so a failed
        apply is retried on the next tick."""
        self._emitted[manifest["metadata"]["name"]] = _canonical(manifest)


def _canonical(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"))
