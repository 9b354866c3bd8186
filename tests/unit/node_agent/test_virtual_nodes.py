"""Virtual nodes answer as real agents do: every ack and heartbeat signed with its node's key
(issue 22 item 1), or the preemption service would refuse them all."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.virtual import VirtualNodes
from gfs.services.platform.signing import SIGNED_TYPES, SignatureCheck, check_signature, node_key, sign

SECRET = b"unit-virtual-nodes-master-secret-01"


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def send(self, topic_name: str, envelope: Any) -> None:
        self.sent.append((topic_name, envelope.payload))


async def test_virtual_nodes_sign_their_acks_and_heartbeats_with_each_nodes_key() -> None:
    recorder = _Recorder()
    host = VirtualNodes({"v-0": ("H100", 2), "v-1": ("H100", 2)}, SECRET, recorder)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    for node in ("v-0", "v-1"):
        bind = BindCommand(
            command_id=uuid.uuid4(), node=node, task_id=f"t-{node}", task_class=TaskClass.SPOT,
            placements=(Placement(worker_index=0, node=node, gpu_indices=(0,), gpu_fraction=1.0),),
            command="sleep", issued_at=now, attempt=1,
        )  # fmt: skip
        await host.handle(sign(bind, key=node_key(SECRET, node)))
        evict = EvictCommand(
            command_id=uuid.uuid4(), node=node, task_ids=(f"t-{node}",),
            reason=EvictionReason.PREEMPTED_BY_HP, grace_seconds=0.0, issued_at=now, attempt=1,
        )  # fmt: skip
        await host.handle(sign(evict, key=node_key(SECRET, node)))
    await host.heartbeat()
    sent = [p for _, p in recorder.sent if isinstance(p, SIGNED_TYPES)]
    kinds = sorted({type(p).__name__ for p in sent})
    assert kinds == ["EvictAck", "NodeTelemetry", "WorkerExited", "WorkerStarted"]
    assert len(sent) == 2 * 4  # per node: started, exited (evicted), the ack, one heartbeat
    for payload in sent:
        assert check_signature(payload, key=node_key(SECRET, payload.node)) is SignatureCheck.VALID
        other = "v-1" if payload.node == "v-0" else "v-0"
        assert check_signature(payload, key=node_key(SECRET, other)) is SignatureCheck.MISMATCH


async def test_on_the_controllable_clock_virtual_workers_exit_by_the_clock_not_the_wall() -> None:
    """The accelerated demo's virtual nodes: a worker of `--duration 600` bound at clock time T
    exits at the first ADVANCE at or after T + 600 s, stamped with that tick's time; a command
    issued an hour of clock time ahead of the wall is fresh (the clock runs ahead by design)."""
    recorder = _Recorder()
    host = VirtualNodes({"v-0": ("H100", 2)}, SECRET, recorder)  # type: ignore[arg-type]
    host.max_age_s = host.max_ahead_s = 86400.0
    t0 = datetime.now(UTC) + timedelta(hours=1)
    await host.advance(t0)
    bind = BindCommand(
        command_id=uuid.uuid4(), node="v-0", task_id="t-1", task_class=TaskClass.SPOT,
        placements=(Placement(worker_index=0, node="v-0", gpu_indices=(0,), gpu_fraction=1.0),),
        command=("gfs", "fake-task", "--duration", "600"), issued_at=t0, attempt=1,
    )  # fmt: skip
    await host.handle(sign(bind, key=node_key(SECRET, "v-0")))
    started = [p for _, p in recorder.sent if isinstance(p, WorkerStarted)]
    assert [p.started_at for p in started] == [t0]
    await host.advance(t0 + timedelta(seconds=599))
    await host.advance(t0 + timedelta(seconds=598))  # the clock never goes back
    assert not [p for _, p in recorder.sent if isinstance(p, WorkerExited)]
    await host.advance(t0 + timedelta(seconds=840))
    exited = [p for _, p in recorder.sent if isinstance(p, WorkerExited)]
    assert [(p.task_id, p.exited_at, p.evicted, p.exit_code) for p in exited] == [
        ("t-1", t0 + timedelta(seconds=840), False, 0)
    ]
    await host.advance(t0 + timedelta(seconds=1200))  # exited once only
    assert len([p for _, p in recorder.sent if isinstance(p, WorkerExited)]) == 1
    await host.heartbeat()
    beats = [p for _, p in recorder.sent if isinstance(p, NodeTelemetry)]
    assert [b.sampled_at for b in beats] == [t0 + timedelta(seconds=1200)]
