"""Telemetry: one sample of every GPU with the shares the agent's running workers hold, signed,
on the wall clock (it doubles as the node's heartbeat).

`Telemetry` owns no state of its own: it is given the GPU reader (`GpuBackend`), the journal (the
live workers: their GPU shares and the `running` report of reconciliation), the wall clock, and
where and how to publish (the sink, the node key). It does not go through the ack publisher: a
heartbeat is no answer to a command, has no command trace to continue and stays on the wall clock.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable
from datetime import datetime

from gfs.schemas.envelope import wrap
from gfs.schemas.telemetry import GpuAllocation, GpuProcess, GpuSample, NodeTelemetry, RunningWorker
from gfs.schemas.topics import TELEMETRY_TOPIC
from gfs.services.node_agent.gpu import GpuBackend
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.publisher import PRODUCER, AckSink
from gfs.services.platform.signing import sign

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("gfs.services.node_agent.agent")


class Telemetry:
    """Samples the GPUs and publishes the node's heartbeat (module doc)."""

    def __init__(
        self,
        *,
        node: str,
        gpu_model: str,
        backend: GpuBackend,
        journal: Journal,
        wall_clock: Callable[[], datetime],
        sink: AckSink,
        key: bytes,
        acknowledged: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.acknowledged = acknowledged  # told the sample time of each heartbeat the broker took
        self.monotonic = monotonic
        self.node = node
        self.gpu_model = gpu_model
        self.backend = backend
        self.journal = journal
        self.wall_clock = wall_clock
        self.sink = sink
        self.key = key

    def sample(self) -> NodeTelemetry:
        """One sample of every GPU, with the shares the agent's running workers hold."""
        shares: dict[int, dict[str, float]] = collections.defaultdict(dict)
        task_of_group: dict[int, str] = {}
        for worker in self.journal.live_workers():
            if worker.pid is None:
                continue
            task_of_group[worker.pid] = worker.task_id
            for index in worker.gpu_indices:
                held = shares[index].get(worker.task_id, 0.0)
                shares[index][worker.task_id] = min(1.0, held + worker.gpu_fraction)
        samples = []
        for reading in self.backend.read():
            allocations: list[GpuAllocation] = []
            total = 0.0
            for task_id, fraction in sorted(shares.get(reading.index, {}).items()):
                if total + fraction > 1.0 + 1e-6:
                    log.warning(
                        "GPU %d over-allocated: %s's share left out of telemetry", reading.index, task_id
                    )
                    continue
                total += fraction
                allocations.append(GpuAllocation(task_id=task_id, fraction=fraction))
            samples.append(
                GpuSample(
                    index=reading.index,
                    utilisation_pct=reading.utilisation_pct,
                    memory_used_mib=reading.memory_used_mib,
                    memory_total_mib=reading.memory_total_mib,
                    processes=tuple(
                        GpuProcess(pid=pid, task_id=_task_of(pid, task_of_group), used_memory_mib=used)
                        for pid, used in reading.processes
                    ),
                    allocations=tuple(allocations),
                )
            )
        # The report of what runs here (reconciliation, services/preemption/controller/
        # reconcile_rules.py): every live worker with its attempt, also one still starting.
        running = tuple(
            RunningWorker(task_id=w.task_id, attempt=w.attempt, worker_index=w.worker_index)
            for w in sorted(
                self.journal.live_workers(), key=lambda w: (w.task_id, w.attempt or 0, w.worker_index)
            )
        )
        return NodeTelemetry(
            node=self.node, gpu_model=self.gpu_model, sampled_at=self.wall_clock(), gpus=tuple(samples),
            running=running,
        )  # fmt: skip

    async def publish(self) -> None:
        # The heartbeat stays on the wall clock in topic mode: it says the node is alive now.
        # Signed like every report (the heartbeat, capacity and `running` drive decisions).
        sampled = self.monotonic()
        sample = sign(self.sample(), key=self.key)
        await self.sink.send(TELEMETRY_TOPIC, wrap(sample, producer=PRODUCER, occurred_at=self.wall_clock()))
        if self.acknowledged is not None:  # the send returns once the broker acknowledged it
            self.acknowledged(sampled)


def _task_of(pid: int, task_of_group: dict[int, str]) -> str | None:
    # NVML lists the process using the GPU, often a child of the worker: map it by process group.
    with contextlib.suppress(OSError):
        return task_of_group.get(os.getpgid(pid))
    return None
