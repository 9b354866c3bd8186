"""Issue 22 item 1, "only from that node": the preemption service applies an agent's message
(EvictAck, WorkerStarted, WorkerExited, NodeTelemetry) only when it is signed with the key of the
node it names. Keys and messages are built here; every expectation is the rule written out."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.telemetry import GpuSample, NodeTelemetry, RunningWorker
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.signing import SignedMessage, node_key, sign
from gfs.services.preemption.router.report_auth import Refusal, ReportAuth

MASTER = b"unit-report-auth-master-secret-0123"
AT = datetime(2026, 12, 4, 20, 0, tzinfo=UTC)
COMMAND = uuid.UUID("11111111-2222-4333-8444-555555555555")


def _key(node: str) -> bytes:
    return node_key(MASTER, node)


def _messages(node: str) -> list[SignedMessage]:
    gpu = GpuSample(index=0, utilisation_pct=10.0, memory_used_mib=1.0, memory_total_mib=80.0)
    return [
        EvictAck(command_id=COMMAND, node=node, task_ids=("t",), outcome=EvictOutcome.KILLED, acked_at=AT),
        WorkerStarted(command_id=COMMAND, node=node, task_id="t", worker_index=0, pid=7, started_at=AT),
        WorkerExited(command_id=COMMAND, node=node, task_id="t", worker_index=0, exit_code=0, exited_at=AT),
        NodeTelemetry(node=node, gpu_model="H100", sampled_at=AT, gpus=(gpu,),
                      running=(RunningWorker(task_id="t", attempt=1, worker_index=0),)),
    ]  # fmt: skip


def _ids(message: SignedMessage) -> str:
    return type(message).__name__


@pytest.mark.parametrize("message", _messages("node-x"), ids=_ids)
def test_a_message_signed_with_its_own_nodes_key_is_applied(message: SignedMessage) -> None:
    verdict = ReportAuth(_key).check(sign(message, key=_key("node-x")))
    assert verdict.refusal is None and not verdict.unsigned


@pytest.mark.parametrize("message", _messages("node-x"), ids=_ids)
def test_a_message_for_node_x_signed_with_node_ys_key_is_refused(message: SignedMessage) -> None:
    # Node Y holds a valid key, but only its own: it cannot speak for node X.
    forged = sign(message, key=_key("node-y"))
    verdict = ReportAuth(_key).check(forged)
    assert verdict.refusal is Refusal.SIGNATURE_MISMATCH
    assert "node 'node-x'" in verdict.why(forged) and "another key" in verdict.why(forged)


@pytest.mark.parametrize("message", _messages("node-x"), ids=_ids)
def test_an_unsigned_message_is_refused_while_signatures_are_required(message: SignedMessage) -> None:
    assert ReportAuth(_key).check(message).refusal is Refusal.UNSIGNED
    # During an upgrade (require_signed off) it is applied, flagged so it can be counted.
    relaxed = ReportAuth(_key, require_signed=False).check(message)
    assert relaxed.refusal is None and relaxed.unsigned


@pytest.mark.parametrize("require", [True, False])
def test_a_wrong_or_malformed_signature_is_refused_even_during_the_upgrade(require: bool) -> None:
    ack = _messages("node-x")[0]
    auth = ReportAuth(_key, require_signed=require)
    good = sign(ack, key=_key("node-x"))
    assert auth.check(good.model_copy(update={"signature": good.signature.upper()})).refusal is (
        Refusal.MALFORMED_SIGNATURE
    )
    assert auth.check(good.model_copy(update={"signature": "ab" * 31})).refusal is Refusal.MALFORMED_SIGNATURE
    assert auth.check(sign(ack, key=_key("node-y"))).refusal is Refusal.SIGNATURE_MISMATCH


def test_a_signed_message_altered_after_signing_is_refused() -> None:
    ack, _, exited, telemetry = _messages("node-x")
    auth = ReportAuth(_key)
    signed_ack = sign(ack, key=_key("node-x"))
    assert auth.check(signed_ack.model_copy(update={"outcome": EvictOutcome.NOT_RUNNING})).refusal is (
        Refusal.SIGNATURE_MISMATCH
    )
    # Re-addressing a genuine message to another node breaks it too (the key is the named node's).
    assert auth.check(signed_ack.model_copy(update={"node": "node-y"})).refusal is Refusal.SIGNATURE_MISMATCH
    signed_exit = sign(exited, key=_key("node-x"))
    assert auth.check(signed_exit.model_copy(update={"exit_code": 1})).refusal is Refusal.SIGNATURE_MISMATCH
    # A report that drops the running attempt would release its GPUs: it must be the node's word.
    signed_report = sign(telemetry, key=_key("node-x"))
    assert auth.check(signed_report.model_copy(update={"running": ()})).refusal is Refusal.SIGNATURE_MISMATCH


def test_during_a_rotation_the_previous_secrets_node_keys_are_accepted_and_only_those() -> None:
    old_master = b"unit-report-auth-previous-secret-99"
    ack = _messages("node-x")[0]
    rotating = ReportAuth(_key, previous_key_of=lambda n: node_key(old_master, n))
    assert rotating.check(sign(ack, key=node_key(old_master, "node-x"))).refusal is None
    assert rotating.check(sign(ack, key=_key("node-x"))).refusal is None
    # Another node's key under either secret is still not node X's word.
    assert rotating.check(sign(ack, key=node_key(old_master, "node-y"))).refusal is Refusal.SIGNATURE_MISMATCH
    # Without the previous secret configured, the old key is refused.
    assert ReportAuth(_key).check(sign(ack, key=node_key(old_master, "node-x"))).refusal is (
        Refusal.SIGNATURE_MISMATCH
    )
