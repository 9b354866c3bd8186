"""Views of a pool's runtime for the outside: its PoolStatus for the quota service, and what the
dashboard shows beyond its counts (why spot waits: the quota's inputs and what held the spot head;
the idle GPUs queued work would fit on, issue 35)."""

from __future__ import annotations

from typing import Any

from gfs.schemas.pool_status import PoolStatus
from gfs.services.core.runtime import PoolRuntime
from gfs.services.preemption.controller.types import utc


def why_spot_waits(rt: PoolRuntime) -> dict[str, Any]:
    """The quota's inputs the runtime knows and what held the spot head (issue 21): HP running,
    queued and servable (running + the queued HP that fits now + a reservation's growth: the
    quota's floor), idle GPUs, spot in use, eta, the reservation and the spot head's reason."""
    why = rt.spot_head_reason()
    res = rt.reservation
    return {
        "hp_running_gpus": float(rt.state.hp_in_use),
        "hp_queued_gpus": float(rt.hp.gpus),
        "hp_placeable_gpus": rt.hp_placeable(),
        "idle_gpus": int(rt.state.free.sum()),
        "spot_in_use_gpus": float(rt.state.spot_in_use),
        "eta": rt.eta,
        "spot_head_held_by": None if why is None else why.name,
        "reserved_task_id": None if res is None else str(res.task_id),
        "reserved_nodes": 0 if res is None else len(res.nodes),
    }


def idle_fit(controller: Any) -> dict[str, Any]:
    """Idle GPUs queued work would fit on at the pool's last status, and GPU-hours since start, by
    reason (issue 35; services/preemption/controller/work_conservation.py)."""
    reading = controller.idle_fit
    return {
        "gpus": {r: g for r, g in reading.gpus.items() if g},
        "gpu_hours": {r: s / 3600.0 for r, s in reading.gpu_seconds.items() if s},
    }


def idle_text(reading: dict[str, Any] | None) -> str:
    """'12 GPUs (quota:floor 8, order 4); 40.5 GPU-h' or '-'."""
    if not reading:
        return "-"
    gpus = reading["gpus"]
    hours = sum(reading["gpu_hours"].values())
    parts = ", ".join(f"{r} {g:g}" for r, g in gpus.items())
    now = f"{sum(gpus.values()):g} GPUs ({parts})" if gpus else "0"
    return f"{now}; {hours:.1f} GPU-h"


def pool_status(pool: str, rt: PoolRuntime, at: float, *, observed_at: float) -> PoolStatus:
    """The pool's status for the quota service: what `PoolRuntime.quota_inputs` sees at `at`."""
    inputs = rt.quota_inputs(at, None)
    return PoolStatus(
        pool=pool,
        observed_at=utc(observed_at),
        capacity_gpus=int(inputs.capacity),
        idle_gpus=int(inputs.idle_gpus),
        spot_in_use_gpus=max(0.0, float(inputs.spot_in_use)),
        hp_running_gpus=max(0.0, float(rt.state.hp_in_use)),
        hp_queued_gpus=max(0.0, float(rt.hp.gpus)),
        spot_head_wait_s=None if inputs.head_wait_s is None else max(0.0, inputs.head_wait_s),
        quota_held_wait_s=None if (held := inputs.quota_held_wait_s) is None else max(0.0, held),
        hp_placeable_gpus=None if inputs.hp_placeable is None else max(0.0, inputs.hp_placeable),
        spot_smallest_gpus=inputs.spot_smallest_gpus,
        reserved_task_id=None if (res := rt.reservation) is None else str(res.task_id),
        reserved_nodes=0 if res is None else len(res.nodes),
        spot_head_held_by=None if (why := rt.spot_head_reason()) is None else why.name,
    )
