"""A pool's idle GPUs that queued work would fit on, measured live (issue 35, item 3).

The core names them by reason (services/core/work_conservation.py); this collaborator of the pool
controller takes one reading at every status the pool publishes (the quota's refresh interval,
`preemption_status_s`) and integrates the readings over time, so `/metrics` can serve both the
level (`gfs_preemption_idle_while_work_fits_gpus`) and the GPU-seconds since the process started
(`..._gpu_seconds_total`), and the dashboard can show them per pool.
"""

from __future__ import annotations

from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.work_conservation import REASONS


class IdleWhileWorkFits:
    """The last reading (GPUs per reason) and the GPU-seconds per reason since the first one."""

    __slots__ = ("at", "gpu_seconds", "gpus")

    def __init__(self) -> None:
        self.at: float | None = None
        self.gpus: dict[str, float] = dict.fromkeys(REASONS, 0.0)
        self.gpu_seconds: dict[str, float] = dict.fromkeys(REASONS, 0.0)

    def observe(self, runtime: PoolRuntime, now: float) -> dict[str, float]:
        """Take a reading at `now`: the previous reading held since it was taken (a step)."""
        if self.at is not None and now > self.at:
            elapsed = now - self.at
            for reason, gpus in self.gpus.items():
                self.gpu_seconds[reason] += gpus * elapsed
        self.gpus = runtime.idle_while_work_fits(quota_enabled=True)
        self.at = now if self.at is None else max(self.at, now)
        return self.gpus

    @property
    def total(self) -> float:
        return sum(self.gpus.values())
