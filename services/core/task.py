"""Tasks as the scheduler sees them: immutable specs plus the classes HP and spot."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from gfs.services.core.ids import PoolId, TaskId, TenantId


class TaskClass(enum.Enum):
    """HP tasks are never evicted; SPOT tasks use spare GPUs under a quota and may be evicted."""

    HP = "HP"
    SPOT = "SPOT"


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What a task asks for. GPUs are always counted as gpus_per_worker x workers (spec 8 #4).

    `gpus_per_worker` < 1 shares one GPU with other fractional workers; >= 1 must be a whole number
    of GPUs on one node per worker. `duration_s` is the run time when never evicted.
    """

    task_id: TaskId
    tenant: TenantId
    pool: PoolId
    task_class: TaskClass
    gpus_per_worker: float
    workers: int
    submit_s: float
    duration_s: float
    guarantee_hours: int = 1
    checkpoint_interval_s: float = 3600.0

    @property
    def total_gpus(self) -> float:
        return self.gpus_per_worker * self.workers

    @property
    def is_fractional(self) -> bool:
        return self.gpus_per_worker < 1.0

    @property
    def whole_gpus_per_worker(self) -> int:
        """GPUs one worker takes on its node: max(1, ceil(g)) (spec 5.2)."""
        return max(1, math.ceil(self.gpus_per_worker - 1e-9))

    @property
    def restart_overhead_s(self) -> float:
        """Eviction/restart delay (spec 5.4): 40 s up to 8 GPUs per worker, 60 s above."""
        return 40.0 if self.gpus_per_worker <= 8 else 60.0
