"""One hand-built, valid example of every payload type in the topic registry.

Used by the integration tests to put a real message on each topic. Values are chosen by hand to
satisfy each contract's constraints (and are checked by constructing the pydantic models, so a
contract change shows up here as a construction error, not a silent skip).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from pydantic import BaseModel

from gfs.schemas.clock import ClockAck, ClockPhase, ClockTick
from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome, WarnCommand
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.forecast import DemandForecast, HourlyDemand, PoolDemandForecast
from gfs.schemas.pool_demand import PoolDemandLevel
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    Placement,
    RejectionReason,
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskReclaimWarning,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
    TaskWithdrawn,
)
from gfs.schemas.telemetry import GpuAllocation, GpuSample, NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
COMMAND_ID = UUID("00000000-0000-4000-8000-000000000001")


def task_submitted(task_id: str = "job-1", *, workers: int = 2) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=task_id,
        tenant="org-a",
        gpu_model="A100",
        gpus_per_worker=1.0,
        workers=workers,
        task_class=TaskClass.SPOT,
        guarantee_hours=1,
        expected_duration_s=7200.0,
        command=("python", "train.py"),
    )


def _placement() -> Placement:
    return Placement(worker_index=0, node="node-1", gpu_indices=(0, 1))


def _hour(hour_ahead: int) -> HourlyDemand:
    # A Gaussian with mean 10, std 2: q0.5 = 10, q0.9 = 10 + 1.2816 * 2 = 12.5632, q0.1 = 7.4368.
    return HourlyDemand(
        hour_ahead=hour_ahead, mean=10.0, std=2.0, quantiles={"0.1": 7.4368, "0.5": 10.0, "0.9": 12.5632}
    )


def all_examples() -> dict[str, BaseModel]:
    """Payload class name -> one valid instance, for every type any registry topic carries."""
    examples: list[BaseModel] = [
        task_submitted(),
        TaskCancelled(task_id="job-1", tenant="org-a", reason="user asked"),
        TaskAccepted(task_id="job-1", pool="A100", task_class=TaskClass.SPOT),
        TaskRejected(task_id="job-2", reason=RejectionReason.UNKNOWN_GPU_MODEL, message="no pool for Z9"),
        TaskStarted(
            task_id="job-1", pool="A100", task_class=TaskClass.SPOT, placements=(_placement(),), started_at=T0
        ),
        TaskFinished(task_id="job-1", exit_code=0, finished_at=T0 + timedelta(hours=2)),
        TaskEvicted(
            task_id="job-1",
            node="node-1",
            command_id=COMMAND_ID,
            reason=EvictionReason.PREEMPTED_BY_HP,
            evicted_at=T0 + timedelta(minutes=30),
            lost_gpu_seconds=120.0,
        ),
        GuaranteePeriodClosed(
            task_id="job-1",
            pool="A100",
            guarantee_hours=1,
            period_start=T0,
            period_end=T0 + timedelta(hours=1),
            outcome=GuaranteeOutcome.SUCCEEDED,
        ),
        NodeTelemetry(
            node="node-1",
            gpu_model="A100",
            sampled_at=T0,
            gpus=(
                GpuSample(
                    index=0,
                    utilisation_pct=87.5,
                    memory_used_mib=30_000.0,
                    memory_total_mib=81_920.0,
                    allocations=(GpuAllocation(task_id="job-1", fraction=1.0),),
                ),
            ),
        ),
        DemandForecast(
            pool="A100",
            tenant="org-a",
            origin_time=T0,
            horizon=tuple(_hour(h) for h in (1, 2, 3, 4)),
            model_name="orglinear",
            model_version="v1",
        ),
        PoolDemandForecast(
            pool="A100",
            origin_time=T0,
            horizon=tuple(_hour(h) for h in (1, 2, 3, 4)),
            tenants=3,
            model_name="lstm",
            model_version="v1",
        ),
        PoolStatus(
            pool="A100",
            observed_at=T0,
            capacity_gpus=64,
            idle_gpus=8,
            spot_in_use_gpus=12.0,
            hp_running_gpus=44.0,
            hp_queued_gpus=4.0,
            spot_head_wait_s=600.0,
        ),
        PoolDemandLevel(pool="A100", at=T0, levels={"org-a": 16.0, "org-b": 4.0}),
        SpotQuota(
            pool="A100",
            quotas=(GuaranteeQuota(guarantee_hours=1, quota_gpus=12.0),),
            eta=1.0,
            capacity_gpus=64,
            valid_from=T0,
            valid_until=T0 + timedelta(minutes=5),
            forecast_version="v1@2026-03-01T12:00Z",
        ),
        BindCommand(
            command_id=COMMAND_ID,
            node="node-1",
            task_id="job-1",
            task_class=TaskClass.SPOT,
            placements=(_placement(),),
            command=("python", "train.py"),
            issued_at=T0,
        ),
        EvictCommand(
            command_id=COMMAND_ID,
            node="node-1",
            task_ids=("job-1",),
            reason=EvictionReason.PREEMPTED_BY_HP,
            grace_seconds=30.0,
            preemptor_task_id="job-hp",
            issued_at=T0,
        ),
        EvictAck(
            command_id=COMMAND_ID,
            node="node-1",
            task_ids=("job-1",),
            outcome=EvictOutcome.CHECKPOINTED,
            acked_at=T0 + timedelta(seconds=20),
        ),
        TaskWithdrawn(task_id="job-1", pool="A100", withdrawn_at=T0, reason="owner asked"),
        TaskReclaimWarning(
            task_id="job-1", pool="A100", attempt=1, lead_s=600.0, shortfall_gpus=4.0, issued_at=T0
        ),
        WarnCommand(
            command_id=COMMAND_ID,
            node="node-1",
            task_id="job-1",
            warned_attempt=1,
            lead_seconds=600.0,
            issued_at=T0,
        ),
        WorkerStarted(
            command_id=COMMAND_ID, node="node-1", task_id="job-1", worker_index=0, pid=4242, started_at=T0
        ),
        WorkerExited(
            command_id=COMMAND_ID,
            node="node-1",
            task_id="job-1",
            worker_index=0,
            exit_code=0,
            exited_at=T0 + timedelta(seconds=60),
        ),
        ClockTick(clock="replay-1", at=T0, sequence=7, phase=ClockPhase.PASS),
        ClockAck(
            clock="replay-1",
            component="node-agent/node-1",
            sequence=6,
            at=T0,
            exited=("job-1/0",),
            next_exit_at=T0 + timedelta(seconds=600),
        ),
        DeadLetter(
            original="e30=",  # base64 of "{}"
            error="validation failed: event_type: Field required",
            source_topic="gfs.tasks.submit",
            source_partition=0,
            source_offset=0,
            failed_at=T0,
            consumer_group="gfs-test",
        ),
    ]
    return {type(example).__name__: example for example in examples}
