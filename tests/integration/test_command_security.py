"""Command security at volume against a running agent (issue 14, item 3).

A real `gfs serve node-agent --fake-gpus --metrics-port P` (its own node name, so its own
partition key and group; a fixed node key in GFS_NODE_KEY) runs five genuine long tasks. Then, on
its own partition, `ATTACKS_PER_KIND` commands of each kind, half binds (a new task) and half
evictions (naming the genuine running tasks):

- forged: signed with another key (the first ones claim the genuine binds' command ids, published
  before them: a rejected id must not shadow the real command);
- tampered: signed with the agent's key, then a field changed (the bind's argv, the eviction's
  targets);
- stale: signed with the agent's key, `issued_at` older than the window (a captured command
  replayed late);
- wrong-node: signed with the agent's key and keyed to its node, but addressed to a node whose key
  hashes to the same partition (only the node check catches it);
- replayed: the genuine binds again, and the genuine eviction again after its ack (same command id).

Besides, genuine commands of that co-partitioned neighbour (signed with its key, keyed to it) share
the partition: skipped by key, never acted on.

Checked: no rejected command acted on (no WorkerStarted, no journal entry, no process, no file the
task would write, every genuine task still running until its real eviction), each counted by
reason in `gfs_agent_commands_rejected_total{reason}`, replays re-acked with the same ack (same
pid, same EvictAck) and acted on once. `GFS_COMMAND_ATTACKS` overrides the count.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from live_cluster import _alive, _fake, _kill_fake_task, _until
from live_harness import ServiceProcess, Tap
from quota_harness import _free_port

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.schemas.topics import encode, topic
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import sign
from gfs.services.producers.partitioning import partition_for_key

pytestmark = pytest.mark.integration

ATTACKS_PER_KIND = int(os.environ.get("GFS_COMMAND_ATTACKS", "500"))
KINDS = ("forged", "tampered", "stale", "wrong_node", "neighbour")
GENUINE = 5
# Fixed keys: the agent's own (GFS_NODE_KEY), an attacker's, and the co-partitioned neighbour's.
AGENT_KEY = bytes.fromhex("6766732d6167656e742d6b65792d666f722d7365637572697479207465737421")
FORGER_KEY = bytes.fromhex("6e6f742d7468652d6167656e74732d6b65793a20616e2061747461636b657221")
NEIGHBOUR_KEY = bytes.fromhex("6e65696768626f75722d6e6f64652d6b65792c206e6f7420746865206167656e")
BIND, EVICT = "gfs.commands.bind", "gfs.commands.evict"


def _now() -> datetime:
    return datetime.now(UTC)


def _metrics(text: str) -> dict[str, float]:
    pattern = re.compile(r'^gfs_agent_commands_rejected_total\{[^}]*reason="([a-z_]+)"[^}]*\} ([0-9.e+]+)$')
    return {m[1]: float(m[2]) for line in text.splitlines() if (m := pattern.match(line))}


class Agent:
    def __init__(self, kafka: str, tmp: Path) -> None:
        self.run = uuid.uuid4().hex[:6]
        self.node = f"sec-{self.run}"
        # A neighbour whose commands share the agent's partition of both command topics.
        wanted = {t: partition_for_key(self.node.encode(), topic(t).partitions) for t in (BIND, EVICT)}
        self.neighbour = next(
            n
            for n in (f"sec-{self.run}-nb{i}" for i in range(10_000))
            if all(partition_for_key(n.encode(), topic(t).partitions) == p for t, p in wanted.items())
        )
        self.tmp = tmp
        self.port = _free_port()
        self.ran = tmp / "ran"  # a task that runs writes its environment here
        self.ran.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "GFS_COMMAND_SECRET"}
        env |= {"KAFKA_BOOTSTRAP_SERVERS": kafka, "GFS_NODE_KEY": AGENT_KEY.hex(), "PYTHONUNBUFFERED": "1"}
        self.proc = ServiceProcess(
            [
                "serve",
                "node-agent",
                "--node",
                self.node,
                "--gpu-model",
                f"SEC-{self.run}",
                "--gpus",
                "8",
                "--fake-gpus",
                "--telemetry-s",
                "1",
                "--state-dir",
                str(tmp / self.node),
                "--metrics-port",
                str(self.port),
            ],
            env,
            tmp / "agent.log",
        )

    def task_command(self, task: str, *args: str) -> tuple[str, ...]:
        return _fake("--env-file", str(self.ran / f"{task}.json"), *args)

    def bind(self, task: str, *, gpu: int, node: str | None = None, **changes: Any) -> BindCommand:
        target = node or self.node
        fields: dict[str, Any] = {
            "command_id": uuid.uuid4(),
            "node": target,
            "task_id": task,
            "task_class": TaskClass.SPOT,
            "placements": (Placement(worker_index=0, node=target, gpu_indices=(gpu,)),),
            "command": self.task_command(task, "--duration", "600"),
            "issued_at": _now(),
        }
        return BindCommand(**(fields | changes))

    def evict(self, *tasks: str, node: str | None = None, grace: float = 5.0, **changes: Any) -> EvictCommand:
        fields: dict[str, Any] = {
            "command_id": uuid.uuid4(),
            "node": node or self.node,
            "task_ids": tasks,
            "reason": EvictionReason.PREEMPTED_BY_HP,
            "grace_seconds": grace,
            "issued_at": _now(),
        }
        return EvictCommand(**(fields | changes))

    async def answering(self) -> bool:
        # Fail at once if the agent died (e.g. its metrics port was taken meanwhile), rather than
        # trusting whichever process answers on that port: its /metrics must name this node.
        assert self.proc.proc is not None and self.proc.proc.poll() is None, self.proc.tail(40)
        # /metrics answers before the consumer has its partitions: a fresh group starts at their end,
        # so a command published in between is never read. Ready = the agent logged that it consumes.
        return await self.metrics() is not None and self.consuming()

    def consuming(self) -> bool:
        try:
            return f"node agent {self.node} ready" in self.proc.log.read_text(errors="replace")
        except OSError:
            return False

    async def metrics(self) -> dict[str, float] | None:
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{self.port}/metrics") as r,
            ):
                text = await r.text()
                return _metrics(text) if r.status == 200 and f'node="{self.node}"' in text else None
        except (aiohttp.ClientError, OSError):
            return None

    def journal(self) -> dict[str, Any]:
        return dict(json.loads((self.tmp / self.node / "journal.json").read_text()))

    def log_of(self, task: str) -> str:
        return "".join(
            p.read_text(errors="replace") for p in (self.tmp / self.node / "logs").glob(f"{task}.*.log")
        )


def _processes_of(marker: str) -> set[int]:
    """Pids whose command line names `marker` (every task's argv holds its env-file path)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                pass
    return found


@pytest_asyncio.fixture(loop_scope="session")
async def agent(
    kafka_bootstrap: str, registry_topics: TopicsReport, tmp_path: Path
) -> AsyncIterator[tuple[Agent, Tap]]:
    a = Agent(kafka_bootstrap, tmp_path)
    tap = await Tap(kafka_bootstrap, ("gfs.commands.worker-ack", "gfs.commands.evict-ack")).start()
    a.proc.start()
    try:
        yield a, tap
    finally:
        a.proc.stop()
        # The agent leaves its workers running when it stops: kill every one this test caused.
        for started in tap.payloads(WorkerStarted, lambda s: s.node == a.node):
            _kill_fake_task(started.pid)
        for pid in _processes_of(str(a.ran)):
            _kill_fake_task(pid)
        await tap.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_forged_tampered_stale_replayed_and_wrong_node_commands_at_volume(
    agent: tuple[Agent, Tap], kafka_bootstrap: str
) -> None:
    a, tap = agent
    try:
        await _run(a, tap, kafka_bootstrap)
    except BaseException:
        print(a.proc.tail(40))
        raise


async def _run(a: Agent, tap: Tap, kafka: str) -> None:
    n = ATTACKS_PER_KIND
    await _until(a.answering, 60, "the agent's /metrics")
    node_key = a.node.encode()

    def mine(kind: type, where: Callable[[Any], bool] = lambda _: True) -> list[Any]:
        return tap.payloads(kind, lambda p: p.node == a.node and where(p))

    async with EnvelopeProducer(bootstrap_servers=kafka, client_id="command-security") as producer:
        pending: list[asyncio.Future[Any]] = []

        async def publish(command: BindCommand | EvictCommand, key: bytes = node_key) -> None:
            name = BIND if isinstance(command, BindCommand) else EVICT
            pending.append(
                await producer.send_raw_later(name, value=encode(wrap(command, producer="attacker")), key=key)
            )

        async def flush() -> None:
            await asyncio.gather(*pending)
            pending.clear()

        # The genuine work: five long tasks, one GPU each. Forgeries claiming their command ids go first.
        genuine = [a.bind(f"{a.run}-good-{i}", gpu=i) for i in range(GENUINE)]
        good_tasks = [g.task_id for g in genuine]
        attacks: dict[str, list[tuple[BindCommand | EvictCommand, bytes]]] = {k: [] for k in KINDS}
        for g in genuine:
            claim = a.bind(f"{a.run}-forged-claim-{g.command_id}", gpu=5, command_id=g.command_id)
            attacks["forged"].append((sign(claim, key=FORGER_KEY), node_key))
            await publish(*attacks["forged"][-1])
        await flush()
        signed_genuine = [sign(g, key=AGENT_KEY) for g in genuine]
        for g in signed_genuine:
            await publish(g)
        await flush()
        await _until(
            lambda: {s.task_id for s in mine(WorkerStarted)} >= set(good_tasks), 60, "the genuine tasks"
        )
        assert {s.task_id for s in mine(WorkerStarted)} == set(good_tasks)
        pids = {s.task_id: s.pid for s in mine(WorkerStarted)}
        await _until(
            lambda: all("started" in a.log_of(t) for t in good_tasks), 30, "the genuine workers to run"
        )

        # The attacks: half binds of new tasks, half evictions of the genuine tasks.
        def attack(kind: str, i: int) -> tuple[BindCommand | EvictCommand, bytes]:
            task = f"{a.run}-{kind}-{i}"
            is_bind = i % 2 == 0
            target = a.neighbour if kind in ("wrong_node", "neighbour") else a.node
            command: BindCommand | EvictCommand = (
                a.bind(task, gpu=5 + i % 3, node=target)
                if is_bind
                else a.evict(*good_tasks, node=target, grace=0.0)
            )
            if kind == "forged":
                return sign(command, key=FORGER_KEY), node_key
            if kind == "tampered":
                if is_bind:  # the argv swapped for another program after signing
                    evil = ("sh", "-c", f"touch {a.ran / task}.json; sleep 600")
                    return sign(command, key=AGENT_KEY).model_copy(update={"command": evil}), node_key
                signed = sign(
                    a.evict(f"{a.run}-nothing-{i}", grace=0.0), key=AGENT_KEY
                )  # retargeted after signing
                return signed.model_copy(update={"task_ids": tuple(good_tasks)}), node_key
            if kind == "stale":
                old = _now() - timedelta(seconds=301 + i % 3600)
                return sign(command.model_copy(update={"issued_at": old}), key=AGENT_KEY), node_key
            if kind == "wrong_node":
                return sign(command, key=AGENT_KEY), node_key
            return sign(command, key=NEIGHBOUR_KEY), a.neighbour.encode()  # genuine, for the neighbour

        for kind in KINDS:
            attacks[kind] += [attack(kind, i) for i in range(n - len(attacks[kind]))]
        replays = [(signed_genuine[i % GENUINE], node_key) for i in range(n // 2)]
        flood = [c for kind in KINDS for c in attacks[kind][GENUINE if kind == "forged" else 0 :]] + replays
        random.Random(14).shuffle(flood)
        began = time.monotonic()
        for command, key in flood:
            await publish(command, key)
        # Sentinels: one genuine command per topic after the flood; its ack means the agent read
        # everything before it on that partition.
        sentinel_bind = sign(
            a.bind(
                f"{a.run}-sentinel", gpu=7, command=a.task_command(f"{a.run}-sentinel", "--duration", "0.2")
            ),
            key=AGENT_KEY,
        )
        sentinel_evict = sign(a.evict(f"{a.run}-nothing-here"), key=AGENT_KEY)
        await publish(sentinel_bind)
        await publish(sentinel_evict)
        await flush()
        published_s = time.monotonic() - began
        await _until(
            lambda: mine(WorkerStarted, lambda s: s.task_id == sentinel_bind.task_id),
            180,
            "the sentinel bind",
        )
        await _until(
            lambda: mine(EvictAck, lambda e: e.command_id == sentinel_evict.command_id),
            180,
            "the sentinel eviction",
        )
        handled_s = time.monotonic() - began
        assert (
            mine(EvictAck, lambda e: e.command_id == sentinel_evict.command_id)[0].outcome
            is EvictOutcome.NOT_RUNNING
        )

        # Replays: each genuine bind re-acked with the same WorkerStarted (same pid), acted on once.
        expected_starts = Counter({g.command_id: 1 for g in genuine})
        expected_starts.update(c.command_id for c, _ in replays)
        await _until(
            lambda: (
                len(mine(WorkerStarted, lambda s: s.task_id in good_tasks)) >= sum(expected_starts.values())
            ),
            60,
            "every replayed bind re-acked",
        )
        started = mine(WorkerStarted, lambda s: s.task_id in good_tasks)
        assert Counter(s.command_id for s in started) == expected_starts
        assert all(s.pid == pids[s.task_id] for s in started)

        # Nothing of the attacks acted on: no ack, no journal entry, no process, no file, and the
        # genuine tasks all still run (no forged, tampered, stale or misaddressed eviction took).
        expected_tasks = {*good_tasks, sentinel_bind.task_id}
        assert {s.task_id for s in mine(WorkerStarted)} == expected_tasks
        assert {e.command_id for e in mine(EvictAck)} == {sentinel_evict.command_id}
        assert not tap.payloads((WorkerStarted, EvictAck), lambda p: p.node == a.neighbour)
        journal = a.journal()
        assert {w["task_id"] for w in journal["workers"].values()} == expected_tasks
        attack_ids = {str(c.command_id) for kind in KINDS for c, _ in attacks[kind]} - {
            str(g.command_id) for g in genuine
        }
        assert not attack_ids & set(journal["commands"])
        ran = {p.stem for p in a.ran.glob("*.json")}
        assert ran <= expected_tasks, ran - expected_tasks
        running = {pid for task in good_tasks for pid in _processes_of(f"{task}.json")}
        assert running == set(pids.values())
        assert (
            not _processes_of(f"{a.run}-forged")
            | _processes_of(f"{a.run}-tampered")
            | _processes_of(f"{a.run}-stale")
        )
        assert not _processes_of(f"{a.run}-wrong_node") | _processes_of(f"{a.run}-neighbour")
        assert all(_alive(pid) for pid in pids.values())
        assert all(
            a.log_of(t).count("started") == 1 and "checkpointed" not in a.log_of(t) for t in good_tasks
        )

        # Each counted by reason (forged and tampered are both a signature mismatch).
        counted = await a.metrics()
        assert counted == {"signature_mismatch": 2 * n, "stale": n, "wrong_node": n}, counted

        # The genuine eviction, then replayed: the same EvictAck each time, the tasks stopped once.
        eviction = sign(a.evict(*good_tasks, grace=5.0), key=AGENT_KEY)
        await publish(eviction)
        await flush()
        await _until(
            lambda: mine(EvictAck, lambda e: e.command_id == eviction.command_id), 60, "the genuine eviction"
        )
        evict_replays = n - n // 2
        for _ in range(evict_replays):
            await publish(eviction)
        await flush()
        await _until(
            lambda: len(mine(EvictAck, lambda e: e.command_id == eviction.command_id)) == 1 + evict_replays,
            120,
            "every replayed eviction re-acked",
        )
        acks = mine(EvictAck, lambda e: e.command_id == eviction.command_id)
        assert all(ack == acks[0] for ack in acks) and acks[0].outcome is EvictOutcome.CHECKPOINTED
        await _until(lambda: not any(_alive(pid) for pid in pids.values()), 20, "the evicted workers to stop")
        assert all(a.log_of(t).count("checkpointed") == 1 for t in good_tasks)
        exits = mine(WorkerExited, lambda e: e.task_id in good_tasks)
        assert sorted(
            e.task_id for e in {(e.command_id, e.worker_index): e for e in exits}.values()
        ) == sorted(good_tasks)
        assert await a.metrics() == counted  # replays are not rejections
        assert a.proc.proc is not None and a.proc.proc.poll() is None  # the agent never fell over

    replayed = len(replays) + evict_replays
    print(
        f"\ncommand security: {n} each of {', '.join(KINDS)} and {replayed} replays "
        f"({len(flood)} commands in the flood) published in {published_s:.1f} s, all handled "
        f"{handled_s:.1f} s after the first; rejected by reason: {counted}; "
        f"neighbour's {n} skipped by key; acted on: 0"
    )
