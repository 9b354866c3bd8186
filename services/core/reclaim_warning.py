"""Early reclaim warnings (issue 27 item 2): which spot tasks to tell "checkpoint now".

A pool is at risk when the HP demand the forecast allows for within the lead time (its upper
quantile over the hours that [now, now + lead] touches, never below the HP running and queued now)
is more than the GPUs spot leaves free: `capacity - spot in use`. The shortfall is the spot GPUs HP
would take back. The warned tasks are the ones the victim selection reaches first: GFS's node cost
grows with the GPU time a victim loses (spec 5.2, c_j = w_j g_j (now - start_j)), so tasks are
taken in ascending lost GPU time (ties by task id) until their GPUs cover `margin` times the
shortfall.

A warning changes no decision: the scheduler evicts exactly as it would have. What it changes is
what an eviction costs the victim: a task that checkpointed on the warning loses only the work
since then (`lost_after_warning`). Pure and I/O-free, shared by the simulator and the live service.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskClass

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class WarningSettings:
    lead_s: float = 600.0  # how far ahead a warning looks (the default: 10 minutes)
    quantile: float = 0.95  # the HP-demand quantile a warning guards against
    margin: float = 1.0  # warn spot GPUs covering margin x the shortfall (the victim order is a guess)
    # What one checkpoint on a warning costs the task (GPU time of all its GPUs): a warning is not
    # free, so its net saving is charged this for every warning sent (an assumption, not measured).
    checkpoint_cost_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.lead_s > 0:
            raise ValueError(f"lead_s must be > 0, got {self.lead_s}")
        if not 0.0 < self.quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {self.quantile}")
        if not self.margin > 0:
            raise ValueError(f"margin must be > 0, got {self.margin}")
        if self.checkpoint_cost_s < 0:
            raise ValueError(f"checkpoint_cost_s must be >= 0, got {self.checkpoint_cost_s}")


def lead_rows(now: float, lead_s: float, horizon: int) -> int:
    """How many forecast rows [now, now + lead] touches: row 0 is the hour holding `now` (a forecast
    made at the top of that hour), row k the k-th hour after it. At most `horizon`."""
    first = math.floor(now / HOUR_S)
    last = math.floor((now + lead_s) / HOUR_S - 1e-9)
    return max(1, min(horizon, last - first + 1))


def shortfall_gpus(
    capacity: float,
    spot_in_use: float,
    hp_now: float,
    hp_quantile: Sequence[float] | None,
    now: float,
    lead_s: float,
) -> float:
    """Spot GPUs HP is expected to need within the lead time (0: none).

    `hp_quantile` is the pool's HP-demand quantile per forecast hour (row 0 = the hour holding
    `now`); None (no forecast) falls back to the HP running and queued now, `hp_now`."""
    demand = hp_now
    if hp_quantile is not None and len(hp_quantile):
        rows = lead_rows(now, lead_s, len(hp_quantile))
        demand = max(demand, max(float(q) for q in hp_quantile[:rows]))
    return max(0.0, demand - (capacity - spot_in_use))


def warn_candidates(pool: PoolState, shortfall: float, now: float, margin: float = 1.0) -> list[TaskId]:
    """The running spot tasks to warn, most likely victim first, covering margin x `shortfall` GPUs."""
    if shortfall <= 0:
        return []
    ranked = sorted(
        (rt.spec.total_gpus * max(0.0, now - rt.start_s), tid, rt.spec.total_gpus)
        for tid, rt in pool.running.items()
        if rt.spec.task_class is TaskClass.SPOT
    )
    need = margin * shortfall
    out: list[TaskId] = []
    covered = 0.0
    for _, tid, gpus in ranked:
        if covered >= need:
            break
        out.append(tid)
        covered += gpus
    return out


def lost_after_warning(run_s: float, checkpoint_interval_s: float, warned_run_s: float | None) -> float:
    """Seconds of work an eviction after `run_s` seconds of a run loses: since the last periodic
    checkpoint, or since the warning's checkpoint (at `warned_run_s` into the run) if later."""
    since_periodic = math.fmod(run_s, checkpoint_interval_s) if checkpoint_interval_s > 0 else run_s
    if warned_run_s is None or not 0.0 <= warned_run_s <= run_s:
        return since_periodic
    return min(since_periodic, run_s - warned_run_s)
