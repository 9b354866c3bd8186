"""docs/protocol.md against the running service (issue 38 item 3): the page's own examples, sent as
an outside agent or producer would (raw envelopes written by hand from section 1, no project
encoder), and each outcome the page documents checked on the real broker, refusals included.

The preemption service runs in-process under the page's master secret (section 5's key vector).
Each example is re-addressed to this run (its node, pool and task ids made unique: other tests
share the broker) and re-signed by the page's own rule (tests/contract/protocol_page.py), so what
is sent is the page's example, not the project's encoding of it. Outcomes checked:

- the NodeTelemetry examples are heartbeats: both nodes join the pool; the one whose `running`
  reports an attempt the service does not hold is told to stop it (section 4: an EvictCommand
  naming the attempt, reason NODE_LOST, no grace, once reported for the unknown-work delay);
- section 3's producer steps: TaskSubmitted -> TaskAccepted, the same task id again ->
  TaskRejected, TaskCancelled of the queued task -> TaskWithdrawn;
- every refusal the page's dead-letter table names that these inputs can reach, each dead letter's
  `reason` the table's code: the reports' signature refusals (`unsigned`, `malformed_signature`,
  `signature_mismatch`, and `previous_key_expired` under a rotation that ended), the EvictAck /
  WorkerStarted / WorkerExited examples, which answer no command of this service (`unmatched`),
  and the bad records of section 1 (`not_utf8`, `malformed_json`, `envelope_type`,
  `missing_event_type`, `unknown_event_type`, `unsupported_schema_version`, `invalid_payload`).
  Not reached here: `future_event` (the forecast stream's), and `store_failed`, `unroutable` and
  `failed` (the service's own failures, not an input's fault).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from live_harness import Tap
from preemption_world import Cluster, _service, _settings, _until

from gfs.schemas.commands import EvictCommand
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.tasks import EvictionReason, TaskAccepted, TaskRejected, TaskWithdrawn
from gfs.schemas.topics import DEAD_LETTER_TOPIC
from tests.contract.protocol_page import documented_signed_bytes, key_vector, vectors

pytestmark = pytest.mark.integration

SUBMIT, TELEMETRY = "gfs.tasks.submit", "gfs.nodes.telemetry"
EVICT_ACK, WORKER_ACK = "gfs.commands.evict-ack", "gfs.commands.worker-ack"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _envelope(event_type: str, payload: dict[str, Any], **changes: Any) -> bytes:
    """Section 1's envelope, written by hand."""
    fields = {"event_id": str(uuid.uuid4()), "event_type": event_type, "schema_version": 1,
              "occurred_at": _now(), "producer": "conformance", "payload": payload}  # fmt: skip
    return json.dumps(fields | changes, separators=(",", ":")).encode("utf-8")


class Page:
    """The page's examples, re-addressed to this run and re-signed by section 5."""

    def __init__(self, pool: str) -> None:
        self.master, self.page_node, _ = key_vector()
        self.pool = pool
        self.node = f"{pool.lower()}-gpu-node-07"
        self.tasks = {"job-42": f"{pool}-job-42", "job-43": f"{pool}-job-43"}
        self.examples = vectors()

    def key(self, node: str, master: bytes | None = None) -> bytes:
        # Section 5: K(n) = HMAC-SHA256(M, "gfs/node-command-key/v1" || 0x00 || UTF-8(n)).
        secret = self.master if master is None else master
        return hmac.new(secret, b"gfs/node-command-key/v1\x00" + node.encode(), hashlib.sha256).digest()

    def payload(
        self, name: str, *, node: str | None = None, master: bytes | None = None, **changes: Any
    ) -> dict[str, Any]:
        """The example `name`, re-addressed and signed under `master`'s K(node) (default: the page's)."""
        text = self.examples[f"{name}:payload"]
        text = text.replace(self.page_node, node or self.node).replace('"H100"', json.dumps(self.pool))
        for page_task, ours in self.tasks.items():
            text = text.replace(f'"{page_task}"', json.dumps(ours))
        payload: dict[str, Any] = json.loads(text)
        payload.update(changes)
        signed = documented_signed_bytes(json.dumps(payload))
        payload["signature"] = hmac.new(self.key(payload["node"], master), signed, hashlib.sha256).hexdigest()
        return payload


@pytest.mark.asyncio(loop_scope="session")
async def test_the_pages_examples_get_the_outcomes_the_page_documents(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    page = Page(c.pool)
    master = page.master.decode("ascii")  # the page's M as the text the service reads (all < 0x80)
    # A rotation that ended (section 5): the previous secret's keys are refused after its end.
    previous = "conformance-previous-secret-0123"
    settings = _settings(
        dsn, kafka_bootstrap, c.pool, gfs_command_secret=master, preemption_unknown_work_after_s=1.5,
        preemption_report_every_s=0.5, gfs_command_secret_previous=previous,
        gfs_command_secret_previous_until="2026-01-01T00:00:00Z",
    )  # fmt: skip
    letters = await Tap(kafka_bootstrap, (DEAD_LETTER_TOPIC,)).start()
    # A refused record's letter may come from the router (the record) or the decider (the inbox's
    # copy of it): matched by the value's SHA-256 and this run's consumer groups.
    sent: dict[str, str] = {}  # sha256 of the value -> the reason expected
    groups = {settings.preemption_group, settings.preemption_router_group}

    async def send(topic: str, value: bytes, key: str, refused: str | None = None) -> None:
        await c.producer.send_raw(topic, value=value, key=key.encode())
        if refused is not None:
            sent[hashlib.sha256(value).hexdigest()] = refused

    try:
        async with _service(settings) as (decider, _):
            # The heartbeats: the report's attempt is unknown here, so the service stops it.
            other = f"{c.pool.lower()}-gpu-node-08"
            for _ in range(15):  # 4.5 s of reports: past the unknown-work delay (1.5 s)
                beat = page.payload("telemetry", sampled_at=_now())
                await send(TELEMETRY, _envelope("NodeTelemetry", beat), page.node)
                quiet = page.payload("telemetry-no-report", node=other, sampled_at=_now())
                await send(TELEMETRY, _envelope("NodeTelemetry", quiet), other)
                await asyncio.sleep(0.3)
            await _until(lambda: len(decider.owned_pools()[c.pool].nodes) == 2, timeout=30.0)
            # Sent again while still reported past the delay once more: every one names the attempt.
            stops = await c.tap.wait(EvictCommand, lambda e: e.node == page.node, timeout=30.0)
            for stop in stops:
                assert stop.task_ids == (page.tasks["job-42"],) and stop.attempt == 2, stop
                assert (stop.reason, stop.grace_seconds) == (EvictionReason.NODE_LOST, 0.0), stop
            assert not c.tap.payloads(EvictCommand, lambda e: e.node == other)

            # Section 3, a producer: submit, the same id again, cancel (queued: no quota yet).
            task = f"{c.pool}-portal-1"
            submitted = {"task_id": task, "tenant": "org-conformance", "gpu_model": c.pool,
                         "gpus_per_worker": 1.0, "workers": 1, "task_class": "SPOT",
                         "command": "python train.py"}  # fmt: skip
            await send(SUBMIT, _envelope("TaskSubmitted", submitted), task)
            await c.tap.wait(TaskAccepted, lambda e: e.task_id == task)
            await send(SUBMIT, _envelope("TaskSubmitted", submitted), task)
            await c.tap.wait(TaskRejected, lambda e: e.task_id == task)
            await send(
                SUBMIT, _envelope("TaskCancelled", {"task_id": task, "tenant": "org-conformance"}), task
            )
            await c.tap.wait(TaskWithdrawn, lambda e: e.task_id == task)

            # Reports refused for their signature (section 5).
            unsigned = page.payload("telemetry", sampled_at=_now()) | {"signature": ""}  # "'' if unsigned"
            await send(TELEMETRY, _envelope("NodeTelemetry", unsigned), page.node, "unsigned")
            malformed = page.payload("telemetry", sampled_at=_now()) | {"signature": "not-hex"}
            await send(TELEMETRY, _envelope("NodeTelemetry", malformed), page.node, "malformed_signature")
            altered = page.payload("telemetry", sampled_at=_now())
            altered["gpus"][0]["utilisation_pct"] = 1.0  # after signing: the bytes no longer match
            await send(TELEMETRY, _envelope("NodeTelemetry", altered), page.node, "signature_mismatch")
            old_key = page.payload("telemetry", master=previous.encode(), sampled_at=_now())
            await send(TELEMETRY, _envelope("NodeTelemetry", old_key), page.node, "previous_key_expired")
            # The page's acks answer commands this service never issued.
            await send(EVICT_ACK, _envelope("EvictAck", page.payload("evict-ack")), page.node, "unmatched")
            for name, kind in (("worker-started", "WorkerStarted"), ("worker-exited", "WorkerExited")):
                await send(WORKER_ACK, _envelope(kind, page.payload(name)), page.node, "unmatched")
            # Section 1's bad records, on the task topic.
            bad_task = {**submitted, "task_id": f"{c.pool}-bad", "workers": 0}
            for value, reason in (
                (b"\xff\xfe not text", "not_utf8"),
                (b'{"event_id":', "malformed_json"),
                (b"[1, 2]", "envelope_type"),
                (json.dumps({"payload": {}}).encode(), "missing_event_type"),
                (_envelope("NoSuchEvent", {}), "unknown_event_type"),
                (_envelope("TaskSubmitted", submitted, schema_version=99), "unsupported_schema_version"),
                (_envelope("TaskSubmitted", bad_task), "invalid_payload"),
            ):
                await send(SUBMIT, value, f"{c.pool}-bad", reason)

            def reasons() -> dict[str, set[str | None]]:
                out: dict[str, set[str | None]] = {}
                for d in letters.payloads(DeadLetter, lambda d: d.consumer_group in groups):
                    if d.original_sha256 in sent:
                        out.setdefault(d.original_sha256, set()).add(d.reason)
                return out

            await _until(lambda: len(reasons()) == len(sent), timeout=60.0)
            got = reasons()
            assert {k: got[k] for k in sent} == {k: {v} for k, v in sent.items()}, (got, sent)
    finally:
        await letters.stop()
