"""Policies by stable kebab-case name. Built explicitly by the caller (no import-time filling)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from gfs.services.core.policies.ablations import (
    _claims_variant,
    build_gfs_fifo_victims,
    build_gfs_hold_reserved,
    build_gfs_issue21,
    build_gfs_no_feedback,
    build_gfs_no_forecast,
    build_gfs_no_reservation,
    build_gfs_outside_first,
    build_quota_ablations,
)
from gfs.services.core.policies.chronus import build_chronus
from gfs.services.core.policies.fgd import build_fgd
from gfs.services.core.policies.fifo import build_fifo
from gfs.services.core.policies.gfs import build_gfs
from gfs.services.core.policies.k8s_priority import build_k8s_priority
from gfs.services.core.policies.lyra import build_lyra
from gfs.services.core.policies.protocols import SchedulingPolicy, with_gfs_quota
from gfs.services.core.quota import QuotaSettings

PolicyFactory = Callable[[QuotaSettings | None], SchedulingPolicy]


def _gfs_quota(build: PolicyFactory) -> PolicyFactory:
    def factory(settings: QuotaSettings | None = None) -> SchedulingPolicy:
        return with_gfs_quota(build(settings), settings)

    return factory


def build_registry() -> Mapping[str, PolicyFactory]:
    """name -> factory. To add a policy: write its module with a `build_<name>` factory and add
    one entry here."""
    factories: dict[str, PolicyFactory] = {
        "gfs": build_gfs,
        "fifo": build_fifo,
        # Baselines (spec 6.2) with a reactive quota, and with GFS's forecast quota.
        "k8s-priority": build_k8s_priority,
        "k8s-priority+gfs-quota": _gfs_quota(build_k8s_priority),
        "lyra": build_lyra,
        "lyra+gfs-quota": _gfs_quota(build_lyra),
        "fgd": build_fgd,
        "fgd+gfs-quota": _gfs_quota(build_fgd),
        "chronus": build_chronus,
        "chronus+gfs-quota": _gfs_quota(build_chronus),
        # GFS ablations (spec 6.5).
        "gfs-no-forecast": build_gfs_no_forecast,
        "gfs-no-feedback": build_gfs_no_feedback,
        "gfs-fifo-victims": build_gfs_fifo_victims,
        "gfs-no-reservation": build_gfs_no_reservation,
        # Issue 35's lending switched back alone, and all three of its changes.
        "gfs-hold-reserved": build_gfs_hold_reserved,
        "gfs-issue21": build_gfs_issue21,
        "gfs-claims-soft": _claims_variant("gfs-claims-soft", "soft"),
        "gfs-claims-off": _claims_variant("gfs-claims-off", "off"),
        "gfs-outside-first": build_gfs_outside_first,
        # Issue 10's quota changes, each reverted alone, and all of them (gfs-paper).
        **build_quota_ablations(),
    }
    return MappingProxyType(factories)


def build_policy(name: str, settings: QuotaSettings | None = None) -> SchedulingPolicy:
    registry = build_registry()
    if name not in registry:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name](settings)
