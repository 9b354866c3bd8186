"""Which GFS pool feeds which Kueue flavor / KAI queue, and how a SpotQuota becomes a GPU count.

Pure: no I/O, no clock (callers pass `now`). The adapter's configuration is a small YAML file
(examples: configs/quota-adapter-kueue.yaml, configs/quota-adapter-kai.yaml) read by `load_config`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gfs.schemas.fields import GuaranteeHours
from gfs.schemas.quota import SpotQuota

_STRICT = ConfigDict(extra="forbid", frozen=True)
# A Kubernetes object name (DNS-1123 subdomain), as the CRDs' flavor-name pattern requires.
_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class KueueFlavor(BaseModel):
    """One ResourceFlavor of the spot ClusterQueue and the GFS pool (GPU model) behind it."""

    model_config = _STRICT
    flavor: str = Field(pattern=_K8S_NAME, max_length=253, description="ResourceFlavor name.")
    pool: str = Field(min_length=1, description="GFS pool (GPU model) whose SpotQuota bounds it.")


class KueueClusterQueue(BaseModel):
    """A spot ClusterQueue: its GPU resource group is written whole by the adapter."""

    model_config = _STRICT
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    flavors: tuple[KueueFlavor, ...] = Field(min_length=1, max_length=64)
    # spec.resourceGroups is an atomic list in the CRD: an apply replaces every group, so any
    # other group of this queue (cpu, memory) must be restated here, verbatim, or it is dropped.
    extra_resource_groups: tuple[dict[str, Any], ...] = ()


class KueueTarget(BaseModel):
    model_config = _STRICT
    api_version: Literal["kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"] = "kueue.x-k8s.io/v1beta1"
    cluster_queues: tuple[KueueClusterQueue, ...] = Field(min_length=1)


class KaiQueue(BaseModel):
    """A spot leaf Queue of KAI Scheduler and the GFS pool whose quota bounds its GPU limit."""

    model_config = _STRICT
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    pool: str = Field(min_length=1)
    over_quota_weight: float = Field(default=1.0, ge=0, allow_inf_nan=False)


class KaiTarget(BaseModel):
    model_config = _STRICT
    api_version: Literal["scheduling.run.ai/v2"] = "scheduling.run.ai/v2"
    queues: tuple[KaiQueue, ...] = Field(min_length=1)


class AdapterConfig(BaseModel):
    """The whole adapter configuration; `kueue` and/or `kai` present, `--target` picks one."""

    model_config = _STRICT
    guarantee_hours: int = Field(default=1, gt=0, description="Which SpotQuota duration bounds spot.")
    gpu_resource: str = Field(default="nvidia.com/gpu", min_length=1)
    kueue: KueueTarget | None = None
    kai: KaiTarget | None = None

    @model_validator(mode="after")
    def _some_target(self) -> AdapterConfig:
        if self.kueue is None and self.kai is None:
            raise ValueError("the config names no target: add a `kueue:` or a `kai:` section")
        return self

    @field_validator("guarantee_hours")
    @classmethod
    def _offered(cls, value: int) -> int:
        # Refuse a duration GFS never offers up front, rather than publishing 0 forever because
        # no SpotQuota ever carries it.
        if value not in get_args(GuaranteeHours):
            raise ValueError(f"guarantee_hours must be one GFS offers: {list(get_args(GuaranteeHours))}")
        return value

    def pools(self, target: str) -> frozenset[str]:
        """The GFS pools the chosen target reads."""
        if target == "kueue" and self.kueue is not None:
            return frozenset(f.pool for cq in self.kueue.cluster_queues for f in cq.flavors)
        if target == "kai" and self.kai is not None:
            return frozenset(q.pool for q in self.kai.queues)
        return frozenset()


class ConfigError(ValueError):
    """The adapter configuration file is missing, not YAML, or not a valid AdapterConfig."""


def load_config(path: Path) -> AdapterConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the adapter config {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"the adapter config {path} is not YAML: {exc}") from None
    try:
        return AdapterConfig.model_validate(raw)
    except ValueError as exc:
        raise ConfigError(f"the adapter config {path} is invalid: {exc}") from None


@dataclass(frozen=True)
class SpotGpus:
    """The whole GPUs spot may hold in one pool now, and why (for the log and the dry-run)."""

    gpus: int
    reason: str


def spot_gpus(quota: SpotQuota | None, guarantee_hours: int, now: datetime) -> SpotGpus:
    """Floor the pool's quota for `guarantee_hours` to whole GPUs; 0 whenever GFS promises nothing.

    Every doubtful case answers 0 (no spot borrowing), the safe side: a spot task that is not
    admitted costs a wait, one admitted beyond the forecast costs an eviction of someone's work.
    A quota is in force until `valid_until` (a `valid_from` slightly ahead of this clock is clock
    skew between hosts, not a reason to drop a fresh quota).
    """
    if quota is None:
        return SpotGpus(0, "no SpotQuota received for this pool yet")
    if now >= quota.valid_until:
        return SpotGpus(0, f"quota expired at {quota.valid_until.isoformat()}")
    for entry in quota.quotas:
        if entry.guarantee_hours == guarantee_hours:
            # Floor, never round: 12.7 promised GPUs are 12 whole ones; the 13th is not promised.
            return SpotGpus(
                math.floor(entry.quota_gpus), f"quota {entry.quota_gpus:g} GPUs ({quota.forecast_version})"
            )
    offered = sorted(q.guarantee_hours for q in quota.quotas)
    return SpotGpus(0, f"quota offers no {guarantee_hours} h duration (offers {offered})")
