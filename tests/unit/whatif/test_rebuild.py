"""The live log as a trace (services/whatif/rebuild.py), on hand-made records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from gfs.schemas.tasks import (
    EvictionReason,
    Placement,
    RejectionReason,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
)
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.services.whatif.log_reader import LogRecord
from gfs.services.whatif.outcomes import Event
from gfs.services.whatif.rebuild import rebuild

HOUR = datetime(2026, 3, 2, 10, 0, tzinfo=UTC).timestamp()  # a whole hour


def _at(s: float) -> datetime:
    return datetime.fromtimestamp(HOUR + s, UTC)


def _node(name: str, model: str, gpus: int) -> NodeTelemetry:
    return NodeTelemetry(
        node=name, gpu_model=model, sampled_at=_at(0),
        gpus=tuple(
            GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80) for i in range(gpus)
        ),
    )  # fmt: skip


def _task(tid: str, model: str, cls: TaskClass, duration: float | None, **more: object) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=tid, tenant="org-a", gpu_model=model, gpus_per_worker=2, workers=3, task_class=cls,
        expected_duration_s=duration, command=("true",), **more,  # type: ignore[arg-type]
    )  # fmt: skip


def _started(tid: str, s: float) -> TaskStarted:
    return TaskStarted(
        task_id=tid, pool="A100", task_class=TaskClass.SPOT, started_at=_at(s),
        placements=tuple(
            Placement(worker_index=i, node="n1", gpu_indices=(2 * i, 2 * i + 1)) for i in range(3)
        ),
    )  # fmt: skip


def _rec(topic: str, written: int, occurred: float, payload: object) -> LogRecord:
    return LogRecord(topic, written, HOUR + occurred, payload, uuid.uuid4())


def test_nodes_in_join_order_jobs_from_submissions_and_what_happened_from_the_lifecycle() -> None:
    life = "gfs.tasks.lifecycle"
    records = [
        _rec("gfs.nodes.telemetry", 1, 0, _node("n1", "A100", 8)),
        _rec("gfs.nodes.telemetry", 2, 0, _node("n0", "A100", 4)),  # joined second
        _rec("gfs.nodes.telemetry", 3, 0, _node("x0", "L40", 4)),  # another pool: filtered out
        _rec("gfs.nodes.telemetry", 4, 0, _node("n1", "A100", 8)),  # a later heartbeat
        # Submitted 15 min into the hour: t = 0 is the whole hour before it.
        _rec("gfs.tasks.submit", 5, 900, _task("spot", "A100", TaskClass.SPOT, 7200.0, guarantee_hours=2,
                                               checkpoint_interval_s=600.0)),
        _rec("gfs.tasks.submit", 6, 1000, _task("hp", "A100", TaskClass.HP, None)),
        _rec("gfs.tasks.submit", 7, 1100, _task("bad", "A100", TaskClass.HP, 60.0)),
        _rec("gfs.tasks.submit", 8, 1200, _task("other", "L40", TaskClass.HP, 60.0)),
        _rec(life, 9, 1100, TaskRejected(task_id="bad", reason=RejectionReason.UNKNOWN_TENANT, message="no")),
        _rec(life, 10, 1500, _started("spot", 1500)),
        _rec(life, 11, 1800, _started("hp", 1800)),
        _rec(life, 12, 1800, TaskEvicted(task_id="spot", node="n1", command_id=uuid.uuid4(),
                                         reason=EvictionReason.PREEMPTED_BY_HP, evicted_at=_at(1800),
                                         lost_gpu_seconds=0)),
        _rec(life, 13, 5400, TaskFinished(task_id="hp", exit_code=0, finished_at=_at(5400))),
        _rec("gfs.tasks.submit", 14, 6000, TaskCancelled(task_id="spot", tenant="org-a")),
        _rec(life, 15, 6000, TaskEvicted(task_id="spot", node="n1", command_id=uuid.uuid4(),
                                         reason=EvictionReason.CANCELLED, evicted_at=_at(6000),
                                         lost_gpu_seconds=0, requeued=False)),
    ]  # fmt: skip
    r = rebuild(records, pools=["A100"])
    assert r.origin_s == HOUR
    assert [(n.name, n.gpus) for n in r.trace.nodes] == [("n1", 8), ("n0", 4)]
    spot, hp = r.trace.jobs
    assert (spot.name, spot.submit_s, spot.duration_s, spot.job_class) == ("spot", 900.0, 7200.0, "SPOT")
    assert (spot.gpus_per_worker, spot.workers, spot.guarantee_hours, spot.checkpoint_interval_s) == (
        2,
        3,
        2,
        600.0,
    )
    assert spot.cancel_s == 6000.0
    # No expected duration: the one uninterrupted run it finished, 1800 -> 5400.
    assert (hp.name, hp.submit_s, hp.duration_s, hp.job_class, hp.cancel_s) == (
        "hp",
        1000.0,
        3600.0,
        "HP",
        None,
    )
    assert set(r.tasks) == {"spot", "hp"} and r.left_out == {"rejected at submission": 1}
    assert r.tasks["spot"].gpus == 6.0 and not r.tasks["spot"].hp and r.tasks["hp"].hp
    assert r.happened["spot"] == [(1500.0, Event.START), (1800.0, Event.EVICT), (6000.0, Event.STOP)]
    assert r.end_s == 6000.0
    assert r.span_s == 6000.0 - 900.0


def test_a_task_with_no_duration_to_replay_is_counted_not_guessed() -> None:
    records = [
        _rec("gfs.nodes.telemetry", 1, 0, _node("n1", "A100", 8)),
        _rec("gfs.tasks.submit", 2, 0, _task("running", "A100", TaskClass.HP, None)),
        _rec("gfs.tasks.lifecycle", 3, 60, _started("running", 60)),
    ]
    r = rebuild(records)
    assert r.trace.jobs == () and r.tasks == {}
    assert r.left_out == {"no expected_duration_s and no uninterrupted finished run to measure": 1}
