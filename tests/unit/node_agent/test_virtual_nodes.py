"""Virtual nodes answer as real agents do: every ack and heartbeat signed with its node's key
(issue 22 item 1), or the preemption service would refuse them all."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from schemas.commands import BindCommand, EvictCommand
from schemas.tasks import EvictionReason, Placement, TaskClass
from services.node_agent.virtual import VirtualNodes
from services.platform.signing import SIGNED_TYPES, SignatureCheck, check_signature, node_key, sign

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
