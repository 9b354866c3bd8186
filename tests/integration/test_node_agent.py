"""The node agent on the real broker: signed commands in, real `fake-task` processes started and
stopped, acks and telemetry out; forged/tampered/stale/wrong-node commands refused and counted;
repeats re-acked; a fresh agent skips week-old commands; an agent killed with -9 and restarted
re-adopts its worker. Each test uses its own node name (so its own partition key and group)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from node_agent_world import (
    SECRET,
    TRACE_ID,
    WAIT_S,
    Acks,
    _agent,
    _bind,
    _evict,
    _journal,
    _kill_workers,
    _node,
    _publish,
    _signed,
)
from quota_harness import _free_port

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.topics import decode, encode
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent import procs
from gfs.services.node_agent.agent import UNKNOWN_EXIT_CODE
from gfs.services.node_agent.service import CommandReader
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import node_key

pytestmark = pytest.mark.integration


def _log_of(state_dir: Path, task_id: str) -> str:
    logs = list((state_dir / "logs").glob(f"{task_id}.*.log"))
    return "".join(p.read_text() for p in logs)


async def _until_running(state_dir: Path, task_id: str) -> None:
    # The fake task prints "started" once its SIGTERM handler is in place.
    deadline = time.monotonic() + WAIT_S
    while "started" not in _log_of(state_dir, task_id):
        assert time.monotonic() < deadline, f"{task_id} never started"
        await asyncio.sleep(0.05)


async def test_bind_exit_evict_and_kill_on_the_real_broker(
    kafka_bootstrap: str, publisher: EnvelopeProducer, ack_reader: Callable[[str], Acks], tmp_path: Path
) -> None:
    node = _node()
    acks = ack_reader(node)
    env_file = tmp_path / "env.json"
    async with _agent(kafka_bootstrap, tmp_path, node) as state_dir:
        steady = _bind(node, "steady", "--env-file", str(env_file), gpus=(1, 2), checkpoint_interval_s=30.0)
        brief = _bind(node, "brief", "--duration", "0.5", "--exit-code", "4", gpus=(0,))
        stubborn = _bind(node, "stubborn", "--ignore-sigterm", gpus=(3,))
        for command in (steady, brief, stubborn):
            await _publish(publisher, _signed(command, node))
        await acks.until(lambda a: len(a.of(WorkerStarted)) == 3, "three WorkerStarted")
        assert {s.task_id for s in acks.of(WorkerStarted)} == {"steady", "brief", "stubborn"}
        # WorkerStarted follows the spawn; the worker writes its environment once it runs.
        await _until_running(state_dir, "steady")
        env = json.loads(env_file.read_text())
        assert (env["CUDA_VISIBLE_DEVICES"], env["GFS_TASK_ID"], env["GFS_CHECKPOINT_INTERVAL_S"]) == (
            "1,2", "steady", "30.0",
        )  # fmt: skip
        # The acks continue the command's trace.
        assert all(TRACE_ID.encode() in h.get("traceparent", b"") for h in acks.headers_of(WorkerStarted))

        # A natural exit: its code, not evicted.
        await acks.until(lambda a: any(e.task_id == "brief" for e in a.of(WorkerExited)), "brief's exit")
        (brief_exit,) = [e for e in acks.of(WorkerExited) if e.task_id == "brief"]
        assert (brief_exit.exit_code, brief_exit.evicted) == (4, False)

        # Telemetry (the heartbeat) shows the shares of the running workers.
        await acks.until(lambda a: bool(a.of(NodeTelemetry)), "telemetry")
        await _until_running(state_dir, "steady")
        await _until_running(state_dir, "stubborn")

        # Evictions: SIGTERM seen -> CHECKPOINTED; SIGTERM ignored -> KILLED after the grace.
        graceful, forced = _evict(node, "steady", grace=5.0), _evict(node, "stubborn", grace=1.0)
        await _publish(publisher, _signed(graceful, node))
        await _publish(publisher, _signed(forced, node))
        await acks.until(lambda a: len(a.of(EvictAck)) == 2, "two EvictAcks")
        outcomes = {ack.command_id: ack.outcome for ack in acks.of(EvictAck)}
        assert outcomes == {
            graceful.command_id: EvictOutcome.CHECKPOINTED,
            forced.command_id: EvictOutcome.KILLED,
        }
        assert "checkpointed" in _log_of(state_dir, "steady")
        assert "sigterm ignored" in _log_of(state_dir, "stubborn")
        assert all(TRACE_ID.encode() in h.get("traceparent", b"") for h in acks.headers_of(EvictAck))
        await acks.until(lambda a: len(a.of(WorkerExited)) == 3, "the evicted workers' exits")
        exits = {e.task_id: (e.exit_code, e.evicted) for e in acks.of(WorkerExited)}
        assert exits == {"brief": (4, False), "steady": (0, True), "stubborn": (-9, True)}
        # The SIGTERM latency is recorded in the journal (and the histogram).
        entry = _journal(state_dir)["commands"][str(graceful.command_id)]
        assert entry["sigterm_at"] is not None and entry["ack_published"]


async def test_forged_tampered_stale_and_wrong_node_commands_are_refused_and_repeats_reacked(
    kafka_bootstrap: str, publisher: EnvelopeProducer, ack_reader: Callable[[str], Acks], tmp_path: Path
) -> None:
    node, other = _node(), _node()
    acks = ack_reader(node)
    # Published before the agent starts (a fresh group): still carried out, being recent.
    early = _signed(_bind(node, "early"), node)
    await _publish(publisher, early)

    port = _free_port()
    async with _agent(kafka_bootstrap, tmp_path, node, metrics_port=port) as state_dir:
        forged = _signed(_bind(node, "forged"), node, master="another-master-secret-" + "y" * 16)
        tampered = _signed(_bind(node, "tampered"), node).model_copy(
            update={"command": ("sh", "-c", "echo tampered")}
        )
        stale = _signed(_bind(node, "stale", issued_at=datetime.now(UTC) - timedelta(hours=1)), node)
        # Keyed to this node (its partition) but addressed to another, and validly signed for it.
        wrong = _signed(_evict(other, "early"), other)
        for command in (forged, tampered, stale):
            await _publish(publisher, command)
        await publisher.send_raw(
            "gfs.commands.evict", value=encode(wrap(wrong, producer="it")), key=node.encode()
        )
        await publisher.send_raw("gfs.commands.evict", value=b"\x00 not a command", key=node.encode())
        # Replays: the same bind and the same eviction again.
        await _publish(publisher, early)
        await acks.until(lambda a: len(a.of(WorkerStarted)) == 2, "early's WorkerStarted twice")
        first, again = acks.of(WorkerStarted)
        assert first == again and first.task_id == "early"
        await _until_running(state_dir, "early")
        eviction = _signed(_evict(node, "early", grace=2.0), node)
        await _publish(publisher, eviction)
        await acks.until(lambda a: len(a.of(EvictAck)) == 1, "early's EvictAck")
        await _publish(publisher, eviction)
        await acks.until(lambda a: len(a.of(EvictAck)) == 2, "the repeated EvictAck")
        assert acks.of(EvictAck)[0] == acks.of(EvictAck)[1]
        assert acks.of(EvictAck)[0].outcome is EvictOutcome.CHECKPOINTED
        assert _log_of(state_dir, "early").count("checkpointed") == 1  # acted on once
        assert _log_of(state_dir, "early").count("started") == 1

        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
        # The same port answers the kubelet's liveness probe (infra/k8s node-agent.yaml).
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/healthz") as response:
            assert response.status == 200 and await response.json() == {"status": "alive"}
        counts = {
            line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("gfs_agent_commands_rejected_total{")
        }
        assert counts == {"signature_mismatch": 2, "stale": 1, "wrong_node": 1, "undecodable": 1}
        assert "gfs_agent_sigterm_latency_seconds_count" in text
        # Nothing of the refused commands ran.
        started = {w["task_id"] for w in _journal(state_dir)["workers"].values()}
        assert started == {"early"}


def _gfs() -> str:
    return str(Path(sys.executable).parent / "gfs")


def _spawn_agent(node: str, tmp_path: Path, kafka: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka, "GFS_COMMAND_SECRET": SECRET}
    with log.open("ab") as out:
        return subprocess.Popen(
            [_gfs(), "serve", "node-agent", "--node", node, "--fake-gpus", "--gpus", "2",
             "--gpu-model", "IT-GPU", "--telemetry-s", "1", "--state-dir", str(tmp_path / node)],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def test_an_agent_killed_with_sigkill_readopts_its_worker_after_a_restart(
    kafka_bootstrap: str, publisher: EnvelopeProducer, ack_reader: Callable[[str], Acks], tmp_path: Path
) -> None:
    node = _node()
    acks = ack_reader(node)
    state_dir = tmp_path / node
    log = tmp_path / "agent.log"
    agent = _spawn_agent(node, tmp_path, kafka_bootstrap, log)
    try:
        await _publish(publisher, _signed(_bind(node, "survivor"), node))
        await acks.until(lambda a: len(a.of(WorkerStarted)) == 1, "WorkerStarted", timeout=60)
        await _until_running(state_dir, "survivor")
        (started,) = acks.of(WorkerStarted)
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
        worker = _journal(state_dir)["workers"][f"{started.command_id}/0"]
        assert procs.is_running(worker["pid"], worker["start_ticks"])  # the worker outlived its agent

        agent = _spawn_agent(node, tmp_path, kafka_bootstrap, log)
        eviction = _signed(_evict(node, "survivor", grace=5.0), node)
        await _publish(publisher, eviction)
        await acks.until(lambda a: bool(a.of(EvictAck)), "the EvictAck after the restart", timeout=60)
        assert acks.of(EvictAck)[0].outcome is EvictOutcome.CHECKPOINTED
        await acks.until(lambda a: bool(a.of(WorkerExited)), "the re-adopted worker's exit")
        (exited,) = acks.of(WorkerExited)
        assert (exited.exit_code, exited.evicted) == (UNKNOWN_EXIT_CODE, True)
        assert not procs.is_running(worker["pid"], worker["start_ticks"])
        assert "checkpointed" in _log_of(state_dir, "survivor")
        # The bind was not acted on again: one process ever started. (A WorkerStarted whose publish
        # the kill -9 cut short may be published again after the restart: at-least-once, same pid.)
        assert _log_of(state_dir, "survivor").count("started") == 1
        assert {s.pid for s in acks.of(WorkerStarted)} == {started.pid}
        assert "re-adopting" in log.read_text()
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=20)
            except subprocess.TimeoutExpired:
                agent.kill()
        _kill_workers(state_dir)


async def test_a_fresh_group_starts_after_old_commands(
    kafka_bootstrap: str, publisher: EnvelopeProducer, registry_topics: TopicsReport
) -> None:
    """A new agent's group has no committed offset: it starts at the first record newer than the
    staleness window (by record timestamp), so a week-old command is never even read."""
    node = _node()
    week_ago = datetime.now(UTC) - timedelta(days=7)
    old = _signed(_bind(node, "ancient", issued_at=week_ago), node)
    raw = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await raw.start()
    try:
        # Appended now, stamped a week ago, as a command left over from long ago would be.
        old_at = await raw.send_and_wait(
            "gfs.commands.bind", encode(wrap(old, producer="it")), key=node.encode(),
            timestamp_ms=int(week_ago.timestamp() * 1000),
        )  # fmt: skip
    finally:
        await raw.stop()
    await asyncio.sleep(0.05)
    window_start = datetime.now(UTC)
    await asyncio.sleep(0.05)
    recent = _signed(_bind(node, "recent"), node)
    recent_at = await publisher.send("gfs.commands.bind", wrap(recent, producer="it"))
    assert recent_at.partition == old_at.partition  # same key, same partition

    reader = CommandReader(node=node, servers=[kafka_bootstrap], max_age_s=60.0)
    await reader.start(window_start + timedelta(seconds=60))  # the window starts at `window_start`
    try:
        tp = TopicPartition("gfs.commands.bind", old_at.partition)
        assert tp in reader.consumer.assignment() and len(reader.consumer.assignment()) == 2
        assert old_at.offset < await reader.consumer.position(tp) <= recent_at.offset
        seen: list[str] = []
        deadline = time.monotonic() + WAIT_S
        while "recent" not in seen and time.monotonic() < deadline:
            for records in (await reader.consumer.getmany(timeout_ms=200)).values():
                seen += [
                    decode(r.topic, r.value or b"").payload.task_id for r in records if r.key == reader.key
                ]
        assert seen == ["recent"]
    finally:
        await reader.stop()


async def test_a_worker_reading_its_environment_sees_no_key_secret_or_database_url(
    kafka_bootstrap: str,
    publisher: EnvelopeProducer,
    ack_reader: Callable[[str], Acks],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 22: workers inherited the agent's whole environment. The agent's environment here
    holds what the demo, compose and the fault harness give it (the master secret, the database
    URL) and its own node key; a real `fake-task` writes the environment it got."""
    node = _node()
    acks = ack_reader(node)
    monkeypatch.setenv("GFS_COMMAND_SECRET", SECRET)
    monkeypatch.setenv("GFS_NODE_KEY", node_key(SECRET.encode(), node).hex())
    monkeypatch.setenv("DATABASE_URL", "postgresql://gfs:secret-password@db:5432/gfs")
    monkeypatch.setenv("PREEMPTION_ADMIN_TOKEN", "admin-token-of-the-sre-api")
    env_file = tmp_path / "env.json"
    async with _agent(kafka_bootstrap, tmp_path, node) as state_dir:
        await _publish(publisher, _signed(_bind(node, "reads-env", "--env-file", str(env_file)), node))
        await acks.until(lambda a: bool(a.of(WorkerStarted)), "WorkerStarted")
        await _until_running(state_dir, "reads-env")
        env = json.loads(env_file.read_text())
    leaked = {"GFS_COMMAND_SECRET", "GFS_NODE_KEY", "DATABASE_URL", "PREEMPTION_ADMIN_TOKEN"} & set(env)
    assert not leaked, f"the worker saw {sorted(leaked)}"
    assert not any(SECRET in value or "secret-password" in value for value in env.values())
    # What it needs is there: the allowlisted PATH and what the agent sets for it.
    assert env["PATH"] == os.environ["PATH"]
    assert (env["GFS_TASK_ID"], env["GFS_NODE"], env["CUDA_VISIBLE_DEVICES"]) == ("reads-env", node, "0")
