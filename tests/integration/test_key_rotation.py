"""Issue 25 item 3: the command secret rotated under load, no command lost, on the real broker.

`gfs serve preemption` and two `gfs serve node-agent --fake-gpus` (two GPUs each) run a steady
stream of short two-GPU tasks submitted through GfsClient (one a second, so both nodes are busy).
The procedure of docs/operations.md ("Rotating the command secret") is applied by restarting the
three processes one at a time, in each phase in the order agent n0, service, agent n1:

- phase 1: GFS_COMMAND_SECRET=old, GFS_COMMAND_SECRET_PREVIOUS=new (sign old, accept both);
- phase 2: GFS_COMMAND_SECRET=new, GFS_COMMAND_SECRET_PREVIOUS=old, ..._PREVIOUS_UNTIL in 10 min;
- phase 3: GFS_COMMAND_SECRET=new alone.

The order makes every mixed state happen: in phase 2 n0 signs its acks with the new key while the
service still accepts it only as the previous one, and the service signs commands with the new key
while n1 still accepts it only as the previous one (on a release where agents accept one key, n1
refuses those: the test fails there). After each restart the test waits until both nodes have
started a task of the stream, so each state carries commands both ways.

Checked: every submitted task bound once and started once (one TaskStarted, one bind command id,
one worker pid), none evicted, all finished; no command refused by an agent (its log), no ack or
heartbeat refused by the service (its log, the dead-letter topic). Then the negative: binds signed
with a third secret's key and with the retired old one are refused by the agent and not run, and an
ack signed with the third key is dead-lettered by the service.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from live_cluster import TAPPED, Live, _fake, _pools_ready, _until, live_world
from live_harness import ServiceProcess
from quota_harness import _free_port

from gfs.schemas.commands import BindCommand, EvictAck, EvictOutcome
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import Placement, TaskClass, TaskEvicted, TaskFinished, TaskStarted
from gfs.schemas.topics import DEAD_LETTER_TOPIC
from gfs.schemas.workers import WorkerStarted
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import node_key, sign
from gfs.services.producers.client import GfsClient

pytestmark = pytest.mark.integration

ROTATION_VARS = (
    "GFS_COMMAND_SECRET",
    "GFS_COMMAND_SECRET_PREVIOUS",
    "GFS_COMMAND_SECRET_PREVIOUS_UNTIL",
    "GFS_NODE_KEY",
    "GFS_NODE_KEY_PREVIOUS",
)
TASK_S = "2"  # each task's --duration
SUBMIT_EVERY_S = 1.0


@pytest_asyncio.fixture(loop_scope="session")
async def live(
    database_url: str,
    kafka_bootstrap: str,
    registry_topics: TopicsReport,
    scratch_schema: str,
    tmp_path: Path,
) -> AsyncIterator[Live]:
    tapped = (*TAPPED, DEAD_LETTER_TOPIC)
    async with live_world(
        database_url, kafka_bootstrap, scratch_schema, tmp_path, "rotation", tapped
    ) as world:
        yield world


class Rotation:
    def __init__(self, live: Live) -> None:
        self.live = live
        self.pool = f"ROT-{live.run}"
        self.nodes = [f"e2e-{live.run}-n{i}" for i in range(2)]
        self.port = _free_port()
        self.old = "rotation-old-" + uuid.uuid4().hex
        self.new = "rotation-new-" + uuid.uuid4().hex
        self.until = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()
        # Node timeout well above a restart's length: a node restarting is not lost (nothing evicted).
        self.base = {k: v for k, v in live.base.items() if k not in ROTATION_VARS} | {
            "PREEMPTION_NODE_TIMEOUT_S": "60",
        }
        self.procs: dict[str, ServiceProcess] = {}
        self.starts: Counter[str] = Counter()

    def keys(self, phase: int) -> dict[str, str]:
        """The docs/operations.md procedure: the two settings of each phase (0: before it)."""
        old, new = self.old, self.new
        return [
            {"GFS_COMMAND_SECRET": old},
            {"GFS_COMMAND_SECRET": old, "GFS_COMMAND_SECRET_PREVIOUS": new},
            {"GFS_COMMAND_SECRET": new, "GFS_COMMAND_SECRET_PREVIOUS": old,
             "GFS_COMMAND_SECRET_PREVIOUS_UNTIL": self.until},
            {"GFS_COMMAND_SECRET": new},
        ][phase]  # fmt: skip

    def start(self, name: str, phase: int) -> None:
        self.starts[name] += 1
        if name == "service":
            extra = {"PREEMPTION_API_PORT": str(self.port), "PREEMPTION_INSTANCE": "rot",
                     "PREEMPTION_POOLS": self.pool}  # fmt: skip
            args = ["serve", "preemption"]
        else:
            extra = {}
            args = ["serve", "node-agent", "--node", name, "--gpu-model", self.pool, "--gpus", "2",
                    "--fake-gpus", "--telemetry-s", "0.5",
                    "--state-dir", str(self.live.tmp / name)]  # fmt: skip
        log = self.live.tmp / f"{'service' if name == 'service' else 'agent-' + name}.log"
        proc = ServiceProcess(args, self.base | extra | self.keys(phase), log).start()
        self.procs[name] = proc
        self.live.procs.append(proc)

    async def ready(self, name: str) -> None:
        if name == "service":
            await self.live.quota(self.pool, 4.0, 4)  # as it may be read again after a restart
            await _until(_pools_ready(self.port, {self.pool: 2}), 90, "the service to see both nodes")
            return
        proc = self.procs[name]

        def up() -> bool:
            assert proc.proc is not None and proc.proc.poll() is None, proc.tail()
            return proc.log.read_text(errors="replace").count(f"node agent {name} ready") >= self.starts[name]

        await _until(up, 90, f"agent {name} to start")

    def logs(self, name: str) -> str:
        return self.procs[name].log.read_text(errors="replace")


@pytest.mark.asyncio(loop_scope="session")
async def test_the_command_secret_rotates_under_load_and_no_command_is_refused_or_lost(
    live: Live, kafka_bootstrap: str
) -> None:
    r = Rotation(live)
    began = time.monotonic()
    try:
        await _rotate(r, live, kafka_bootstrap)
    except BaseException:
        print(live.logs())
        raise
    print(f"key rotation: took {time.monotonic() - began:.0f} s")


async def _rotate(r: Rotation, live: Live, kafka: str) -> None:
    for name in ("service", *r.nodes):
        r.start(name, 0)
    for name in ("service", *r.nodes):
        await r.ready(name)
    submitted: list[str] = []
    stop = asyncio.Event()

    def started_on(node: str) -> set[str]:
        return {w.task_id for w in live.tap.payloads(WorkerStarted, lambda w: w.node == node)}

    async with GfsClient(bootstrap_servers=kafka, producer_name="rotation") as client:

        async def stream() -> None:
            while not stop.is_set():
                task = f"{live.run}-t{len(submitted)}"
                await client.submit_new(
                    task_id=task, tenant="org-rotation", gpu_model=r.pool, gpus_per_worker=2, workers=1,
                    task_class=TaskClass.SPOT, command=_fake("--duration", TASK_S),
                )  # fmt: skip
                submitted.append(task)
                await asyncio.sleep(SUBMIT_EVERY_S)

        load = asyncio.create_task(stream())
        try:
            for phase in (1, 2, 3):
                for name in (r.nodes[0], "service", r.nodes[1]):
                    before = {n: started_on(n) for n in r.nodes}
                    await asyncio.to_thread(r.procs[name].stop)  # the stream goes on meanwhile
                    r.start(name, phase)
                    await r.ready(name)
                    # Both nodes run a new task in this state: commands and acks crossed it both ways.
                    await _until(
                        lambda b=before: all(started_on(n) - b[n] for n in r.nodes),  # type: ignore[misc]
                        90,
                        f"both nodes to start a task after {name} moved to phase {phase}",
                    )
        finally:
            stop.set()
            await load
        await _until(
            lambda: {f.task_id for f in live.tap.payloads(TaskFinished)} >= set(submitted),
            180,
            "every submitted task to finish",
        )

    mine = set(submitted)
    # The stream ran through all nine restarts (each waited for a new task on both nodes).
    assert len(mine) >= 10, submitted
    # Events are delivered at least once (an outbox row published just before a stop is published
    # again by the next instance, with its event id): a start counts once per event id, and a
    # second start of a task is a second event id, which fails here.
    started = live.tap.once(TaskStarted)
    starts = Counter(s.task_id for s in started if s.task_id in mine)
    redelivered = len(live.tap.payloads(TaskStarted)) - len(started)
    print(f"TaskStarted: {len(started)} events, {redelivered} delivered again with the same event id")
    assert starts == Counter(dict.fromkeys(mine, 1)), starts - Counter(dict.fromkeys(mine, 1))
    binds: dict[str, set[uuid.UUID]] = {}
    for b in live.tap.payloads(BindCommand, lambda b: b.task_id in mine):
        binds.setdefault(b.task_id, set()).add(b.command_id)
    assert {t: len(ids) for t, ids in binds.items()} == dict.fromkeys(mine, 1)
    pids: dict[str, set[tuple[str, int]]] = {}
    for w in live.tap.payloads(WorkerStarted, lambda w: w.task_id in mine):
        pids.setdefault(w.task_id, set()).add((w.node, w.pid))
    assert {t: len(p) for t, p in pids.items()} == dict.fromkeys(mine, 1)
    assert not live.tap.payloads(TaskEvicted, lambda e: e.task_id in mine)
    for node in r.nodes:
        assert "command rejected" not in r.logs(node), node
    assert "preemption: refused" not in r.logs("service")
    assert not live.tap.payloads(DeadLetter, lambda d: live.run in d.error)
    print(f"\nkey rotation: 9 restarts, {len(mine)} tasks each bound and started once, none refused")

    # The negative: keys neither side accepts now (a third secret's; the retired old one).
    node = r.nodes[0]
    forged = []
    for label, secret in (("third", "rotation-third-" + uuid.uuid4().hex), ("old", r.old)):
        bind = BindCommand(
            command_id=uuid.uuid4(), node=node, task_id=f"{live.run}-forged-{label}",
            task_class=TaskClass.SPOT, placements=(Placement(worker_index=0, node=node, gpu_indices=(0,)),),
            command=_fake("--duration", "1"), issued_at=datetime.now(UTC),
        )  # fmt: skip
        forged.append(sign(bind, key=node_key(secret.encode(), node)))
    for command in forged:
        await live.producer.send("gfs.commands.bind", wrap(command, producer="forger"))
    third_ack = EvictAck(
        command_id=uuid.uuid4(), node=node, task_ids=(f"{live.run}-t0",), outcome=EvictOutcome.KILLED,
        acked_at=datetime.now(UTC),
    )  # fmt: skip
    await live.producer.send(
        "gfs.commands.evict-ack",
        wrap(sign(third_ack, key=node_key(b"rotation-third-ack-" + uuid.uuid4().hex.encode(), node)),
             producer="forger"),
    )  # fmt: skip
    await _until(
        lambda: all(f"reason=signature_mismatch BindCommand {c.command_id}" in r.logs(node) for c in forged),
        60,
        "the agent to refuse both forged binds",
    )
    await _until(
        lambda: live.tap.payloads(DeadLetter, lambda d: node in d.error and "EvictAck refused" in d.error),
        60,
        "the service to dead-letter the forged ack",
    )
    assert not live.tap.payloads(WorkerStarted, lambda w: "forged" in w.task_id)
