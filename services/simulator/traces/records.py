"""Format-neutral trace records: what every loader and generator produces.

Loaders convert their file format into these frozen records at the edge; the simulator turns them
into core tasks and nodes. Times are seconds since the trace's time origin (t = 0), which the
simulator maps to 2024-03-01 00:00 (a Friday) for calendar features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

JobClass = Literal["HP", "SPOT"]


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One node: its pool (GPU model), GPU count and CPU count, as in `node_info_df.csv`."""

    name: str
    gpu_model: str
    gpus: int
    cpus: int


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job, as in `job_info_df.csv`.

    `gpus_per_worker` may be fractional (< 1 shares a GPU); the job needs
    `gpus_per_worker * workers` GPUs in total (spec 8 #4). `duration_s` is the run time the job
    needs when it is never evicted. `guarantee_hours` is the spot guarantee the job asks for
    (1, 2 or 4; the GFS trace has none, so loaders default it to 1). `checkpoint_interval_s` is how
    often the job checkpoints (an eviction loses the work since the last one). `cancel_s`: when the
    job's owner cancels it (seconds since the trace start, >= `submit_s`; None = never): a queued
    job is withdrawn, a running one stopped for good, a finished one is not affected.
    """

    name: str
    organization: str
    gpu_model: str
    cpu_request: float
    gpus_per_worker: float
    workers: int
    submit_s: float
    duration_s: float
    job_class: JobClass
    guarantee_hours: int = 1
    checkpoint_interval_s: float = 3600.0
    cancel_s: float | None = None

    @property
    def total_gpus(self) -> float:
        return self.gpus_per_worker * self.workers


@dataclass(frozen=True, slots=True)
class Trace:
    """A whole trace: nodes, jobs sorted by (submit_s, name), and its length in seconds."""

    nodes: tuple[TraceNode, ...]
    jobs: tuple[TraceJob, ...]
    horizon_s: float
    source: str = ""
