"""`gfs serve virtual-nodes`: one process standing in for many GPU nodes, for demos at scale.

Each virtual node publishes its NodeTelemetry heartbeat, verifies every command addressed to it
(signature with its own node key, freshness, node), and answers as an agent would, without starting
processes: WorkerStarted at once, WorkerExited when the worker's `--duration` (read from the
fake-task command) has passed, and for an eviction an EvictAck (CHECKPOINTED) with WorkerExited
marked evicted; each signed with its node's key, as a real agent signs them. It keeps its state in
memory: a restarted host forgets its workers (use real agents, `gfs serve node-agent`, where that
matters). During a key rotation it accepts commands signed with the previous secret's node keys
until `previous_until`, as agents do (services/platform/key_rotation.py), and signs with the
current secret's.

Its time is the wall clock, or (`clock_name` set, `--clock topic`) the controllable clock of
schemas/clock.py, as a node agent's `AGENT_CLOCK=topic`: the latest ADVANCE tick of that clock is
"now" for heartbeats, acks and the freshness check, and a worker exits at the first ADVANCE at or
after its start plus its `--duration` (so the accelerated demo's virtual workers run for their
trace durations in the trace's time, however fast the clock goes). It sends no ClockAck: the demo's
free-running clock waits for nobody (services/demo/clock.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from uuid import UUID

from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.clock import ClockPhase, ClockTick
from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.topics import (
    BIND_TOPIC,
    CLOCK_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    TELEMETRY_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
    topic,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.security import Rejection, signature_rejection
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity
from gfs.services.platform.key_rotation import check_rotating
from gfs.services.platform.signing import node_key, sign

log = logging.getLogger(__name__)
PRODUCER = "gfs-virtual-nodes"


def duration_of(command: str | tuple[str, ...]) -> float | None:
    """The `--duration S` of a fake-task command, if any."""
    argv = command.split() if isinstance(command, str) else list(command)
    for i, arg in enumerate(argv[:-1]):
        if arg == "--duration":
            with contextlib.suppress(ValueError):
                return float(argv[i + 1])
    return None


@dataclass(slots=True)
class VirtualNodes:
    nodes: dict[str, tuple[str, int]]  # name -> (GPU model, GPU count)
    secret: bytes
    producer: EnvelopeProducer
    max_age_s: float = 300.0
    max_ahead_s: float = 30.0  # how far a command's issued_at may be ahead of this host's clock
    # The controllable clock's time (the last ADVANCE); None: the wall clock.
    sim_now: datetime | None = None
    # On the controllable clock, (task, command id) -> when its worker exits (no timer: the clock's
    # ticks, not the wall, make it due).
    due: dict[tuple[str, UUID], datetime] = field(default_factory=dict)
    keys: dict[str, bytes] = field(default_factory=dict)
    # GFS_COMMAND_SECRET_PREVIOUS and its window (key_rotation.py): accepted, never signed with.
    previous_secret: bytes | None = None
    previous_until: datetime | None = None
    previous_keys: dict[str, bytes] = field(default_factory=dict)
    # (task, command id) -> the timer that reports its exit
    running: dict[tuple[str, UUID], tuple[BindCommand, asyncio.TimerHandle | None]] = field(
        default_factory=dict
    )
    seen: set[UUID] = field(default_factory=set)
    # (node, task, attempt) an eviction named: a bind of it read later never starts (docs/attempts.md).
    revoked: set[tuple[str, str, int]] = field(default_factory=set)
    rejected: int = 0
    rejections: collections.Counter[str] = field(default_factory=collections.Counter)  # by reason
    acted: int = 0
    # Exit reports in flight: held so the loop does not drop (garbage-collect) a pending one.
    exiting: set[asyncio.Future[None]] = field(default_factory=set)

    def now(self) -> datetime:
        return self.sim_now if self.sim_now is not None else datetime.now(UTC)

    async def advance(self, at: datetime) -> None:
        """The controllable clock moved to `at`: workers due by then exit (never backwards)."""
        if self.sim_now is not None and at <= self.sim_now:
            return
        self.sim_now = at
        for key, when in sorted(self.due.items(), key=lambda item: item[1]):
            if when <= at and key in self.running:
                self.due.pop(key, None)
                await self._exit(self.running[key][0], evicted=False)

    def key(self, node: str) -> bytes:
        found = self.keys.get(node)
        if found is None:
            found = self.keys[node] = node_key(self.secret, node)
        return found

    def previous_key(self, node: str) -> bytes | None:
        if self.previous_secret is None:
            return None
        found = self.previous_keys.get(node)
        if found is None:
            found = self.previous_keys[node] = node_key(self.previous_secret, node)
        return found

    def refusal(self, command: BindCommand | EvictCommand) -> Rejection | None:
        """Why `command` is refused (the agents' `gfs_agent_commands_rejected_total` reasons), or None."""
        now = self.now()
        signature = check_rotating(
            command, key=self.key(command.node), previous=self.previous_key(command.node),
            until=self.previous_until, now=datetime.now(UTC),  # the window is wall-clock time
        )  # fmt: skip
        rejection = signature_rejection(signature)
        if rejection is not None:
            return rejection
        if command.issued_at < now - timedelta(seconds=self.max_age_s):
            return Rejection.STALE
        if command.issued_at > now + timedelta(seconds=self.max_ahead_s):
            return Rejection.FUTURE
        return None

    async def heartbeat(self) -> None:
        now = self.now()
        for node, (model, gpus) in self.nodes.items():
            samples = tuple(
                GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
                for i in range(gpus)
            )
            await self.producer.send(
                TELEMETRY_TOPIC,
                wrap(
                    sign(
                        NodeTelemetry(node=node, gpu_model=model, sampled_at=now, gpus=samples),
                        key=self.key(node),
                    ),
                    producer=PRODUCER,
                ),
            )

    async def handle(self, command: BindCommand | EvictCommand) -> None:
        if command.node not in self.nodes:
            return
        now = self.now()
        reason = self.refusal(command)
        if reason is not None:
            self.rejected += 1
            self.rejections[reason] += 1
            log.warning(
                "virtual node %s: refused %s %s reason=%s",
                command.node, type(command).__name__, command.command_id, reason,
            )  # fmt: skip
            return
        if command.command_id in self.seen:
            return
        self.seen.add(command.command_id)
        self.acted += 1
        if isinstance(command, BindCommand):
            revoked = (command.node, command.task_id, command.attempt or 0) in self.revoked
            if command.attempt is not None and revoked:
                await self._exit(command, evicted=True, code=127)  # evicted before it started
                return
            for p in command.placements:
                ack = WorkerStarted(command_id=command.command_id, node=command.node, task_id=command.task_id,
                                    worker_index=p.worker_index, pid=1, started_at=now,
                                    attempt=command.attempt)  # fmt: skip
                await self.producer.send(
                    WORKER_ACK_TOPIC, wrap(sign(ack, key=self.key(ack.node)), producer=PRODUCER)
                )
            seconds = duration_of(command.command)
            handle = None
            if seconds is not None and self.sim_now is not None:
                self.due[(command.task_id, command.command_id)] = now + timedelta(seconds=seconds)
            elif seconds is not None:
                loop = asyncio.get_running_loop()
                handle = loop.call_later(seconds, self._exit_later, command)
            self.running[(command.task_id, command.command_id)] = (command, handle)
            return
        if command.attempt is not None:
            self.revoked |= {(command.node, task, command.attempt) for task in command.task_ids}
        stopped = 0
        for (task, _), (bind, handle) in list(self.running.items()):
            same_attempt = command.attempt is None or bind.attempt in (None, command.attempt)
            if task in command.task_ids and bind.node == command.node and same_attempt:
                if handle is not None:
                    handle.cancel()
                await self._exit(bind, evicted=True)
                stopped += 1
        outcome = EvictOutcome.CHECKPOINTED if stopped else EvictOutcome.NOT_RUNNING
        done = EvictAck(command_id=command.command_id, node=command.node, task_ids=command.task_ids,
                        outcome=outcome, acked_at=self.now(), attempt=command.attempt)  # fmt: skip
        await self.producer.send(
            EVICT_ACK_TOPIC, wrap(sign(done, key=self.key(done.node)), producer=PRODUCER)
        )

    def _exit_later(self, command: BindCommand) -> None:
        future = asyncio.ensure_future(self._exit(command, evicted=False))
        self.exiting.add(future)
        future.add_done_callback(self.exiting.discard)

    async def _exit(self, command: BindCommand, *, evicted: bool, code: int = 0) -> None:
        self.running.pop((command.task_id, command.command_id), None)
        self.due.pop((command.task_id, command.command_id), None)
        for p in command.placements:
            ack = WorkerExited(command_id=command.command_id, node=command.node, task_id=command.task_id,
                               worker_index=p.worker_index, exit_code=code, exited_at=self.now(),
                               evicted=evicted, attempt=command.attempt)  # fmt: skip
            await self.producer.send(
                WORKER_ACK_TOPIC, wrap(sign(ack, key=self.key(ack.node)), producer=PRODUCER)
            )


async def run_virtual_nodes(
    nodes: dict[str, tuple[str, int]],
    *,
    bootstrap: list[str],
    secret: bytes,
    telemetry_s: float,
    stop: asyncio.Event,
    clock_name: str | None = None,
    previous_secret: bytes | None = None,
    previous_until: datetime | None = None,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Serve `nodes` until `stop`; `clock_name`: follow that controllable clock (module doc).
    `security`: the Kafka settings (on a secured broker, a principal with the agents' ACL rows)."""
    async with EnvelopeProducer(
        bootstrap_servers=bootstrap, client_id="gfs-virtual-nodes", security=security
    ) as producer:
        host = VirtualNodes(
            nodes, secret, producer, previous_secret=previous_secret, previous_until=previous_until
        )
        if clock_name is not None:
            # The clock runs ahead of the wall by design, and the host may read a command before
            # the tick it was issued at: freshness is the agents' on the topic clock (a day).
            host.max_age_s = host.max_ahead_s = 86400.0
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, **security.client_kwargs()
        )
        await consumer.start()
        watched = (BIND_TOPIC, EVICT_TOPIC)
        if clock_name is not None:
            watched += (CLOCK_TOPIC,)
        tps = [TopicPartition(t, p) for t in watched for p in range(topic(t).partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)  # a virtual host starts fresh: no old command is acted on
        last_beat = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() - last_beat >= telemetry_s:
                    last_beat = time.monotonic()
                    await host.heartbeat()
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        if r.topic == CLOCK_TOPIC:
                            await _on_tick(host, r.value or b"", clock_name)
                            continue
                        if (r.key or b"").decode() not in nodes:
                            continue
                        with contextlib.suppress(ValueError):
                            payload = decode(r.topic, r.value or b"").payload
                            if isinstance(payload, BindCommand | EvictCommand):
                                await host.handle(payload)
        finally:
            await consumer.stop()


async def _on_tick(host: VirtualNodes, value: bytes, clock_name: str | None) -> None:
    """An ADVANCE of the followed clock moves the host's time; other clocks and phases are ignored."""
    with contextlib.suppress(ValueError):
        tick = decode(CLOCK_TOPIC, value).payload
        if isinstance(tick, ClockTick) and tick.clock == clock_name and tick.phase is ClockPhase.ADVANCE:
            await host.advance(tick.at)
