"""The topic registry: the one place that says which topic carries which payloads, under which key.

Everything that touches Kafka (producers, consumers, the topic-init container, infra/kafka/
topics.yaml, the exported JSON Schemas) derives from `TOPICS`; static tests check the checked-in
infrastructure files against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from gfs.schemas.clock import ClockAck, ClockTick
from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, WarnCommand
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.decoding import decode_for
from gfs.schemas.envelope import Envelope
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.schemas.pool_demand import PoolDemandLevel
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import (
    GuaranteePeriodClosed,
    TaskAccepted,
    TaskCancelled,
    TaskEvicted,
    TaskFinished,
    TaskReclaimWarning,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
    TaskWithdrawn,
)
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted

__all__ = [
    "BIND_TOPIC",
    "CLOCK_ACK_TOPIC",
    "CLOCK_TOPIC",
    "DEAD_LETTER_TOPIC",
    "EVICT_ACK_TOPIC",
    "EVICT_TOPIC",
    "FORECASTS_TOPIC",
    "POOL_DEMAND_TOPIC",
    "POOL_STATUS_TOPIC",
    "QUOTAS_TOPIC",
    "TASK_LIFECYCLE_TOPIC",
    "TASK_SUBMIT_TOPIC",
    "TELEMETRY_TOPIC",
    "TOPICS",
    "WORKER_ACK_TOPIC",
    "DeadLetter",
    "TopicSpec",
    "decode",
    "encode",
    "key_of",
    "topic",
    "topic_for_event_type",
]

_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS
# The task topics (issue 25: they were kept for ever): as long as the forecast's history window
# (services/forecast, `forecast_history_hours` = 14 days), so a forecast stream rebuilt without its
# changelogs still finds two weeks of demand.
TASK_RETENTION_MS = 14 * _DAY_MS

# Every topic's name, once: code names a topic by these constants (a static test fails on a
# literal "gfs.<topic>" anywhere else under services/), so a rename is one edit here.
TASK_SUBMIT_TOPIC = "gfs.tasks.submit"
TASK_LIFECYCLE_TOPIC = "gfs.tasks.lifecycle"
TELEMETRY_TOPIC = "gfs.nodes.telemetry"
FORECASTS_TOPIC = "gfs.forecasts"
POOL_STATUS_TOPIC = "gfs.pools.status"
POOL_DEMAND_TOPIC = "gfs.pools.demand"
QUOTAS_TOPIC = "gfs.quotas"
BIND_TOPIC = "gfs.commands.bind"
EVICT_TOPIC = "gfs.commands.evict"
EVICT_ACK_TOPIC = "gfs.commands.evict-ack"
WORKER_ACK_TOPIC = "gfs.commands.worker-ack"
CLOCK_TOPIC = "gfs.control.clock"
CLOCK_ACK_TOPIC = "gfs.control.clock-acks"
DEAD_LETTER_TOPIC = "gfs.deadletter"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """One topic: its name, the payload field used as the Kafka key, and what it may carry.

    `retention_ms` None means "keep forever" (retention.ms = -1): used for the compacted state
    topics (the latest record per key is the state). What each topic's retention protects is in
    docs/operations.md ("Retention").
    """

    name: str
    key_field: str
    payload_types: tuple[type[BaseModel], ...]
    partitions: int
    retention_ms: int | None
    compacted: bool
    description: str

    def payload_type(self, event_type: str) -> type[BaseModel]:
        """The payload class named `event_type`; KeyError if this topic does not carry it."""
        for payload_type in self.payload_types:
            if payload_type.__name__ == event_type:
                return payload_type
        raise KeyError(
            f"event_type {event_type!r} is not carried by topic {self.name!r} "
            f"(expected one of {sorted(self.event_types())})"
        )

    def event_types(self) -> tuple[str, ...]:
        return tuple(payload_type.__name__ for payload_type in self.payload_types)

    def kafka_config(self) -> dict[str, str]:
        """Topic-level Kafka configs (what `kafka-topics.sh --config` or an admin client sets)."""
        return {
            "cleanup.policy": "compact" if self.compacted else "delete",
            "retention.ms": str(-1 if self.retention_ms is None else self.retention_ms),
        }


# Partition counts: the task and node topics are keyed by many distinct ids and read by the
# scheduler, so 6 partitions leave room for consumer parallelism on the small default stack;
# forecasts and quotas are keyed by pool (6 GPU models in the trace), so 3 suffice. The dead-letter
# topic is rare and read by humans: one partition keeps it in arrival order.
TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(
        name=TASK_SUBMIT_TOPIC,
        key_field="task_id",
        payload_types=(TaskSubmitted, TaskCancelled),
        partitions=6,
        # Nobody replays it from the start (the preemption service rebuilds from its Postgres
        # journal and snapshots); a forecast stream rebuilt from nothing reads its history here.
        retention_ms=TASK_RETENTION_MS,
        compacted=False,
        description="User requests: submit or cancel a task.",
    ),
    TopicSpec(
        name=TASK_LIFECYCLE_TOPIC,
        key_field="task_id",
        payload_types=(
            TaskAccepted,
            TaskRejected,
            TaskStarted,
            TaskFinished,
            TaskEvicted,
            TaskWithdrawn,
            GuaranteePeriodClosed,
            TaskReclaimWarning,
        ),
        partitions=6,
        retention_ms=TASK_RETENTION_MS,
        compacted=False,
        description="What happened to each task, in order per task; the scheduler's event log.",
    ),
    TopicSpec(
        name=TELEMETRY_TOPIC,
        key_field="node",
        payload_types=(NodeTelemetry,),
        partitions=6,
        # Samples are superseded within seconds and double as heartbeats; a day is enough to debug.
        retention_ms=_DAY_MS,
        compacted=False,
        description="Per-GPU samples from every node agent; also the node heartbeat.",
    ),
    TopicSpec(
        name=FORECASTS_TOPIC,
        key_field="pool",
        payload_types=(DemandForecast, PoolDemandForecast),
        partitions=3,
        retention_ms=7 * _DAY_MS,
        compacted=False,
        description="HP GPU demand forecasts per pool and tenant, and per pool (Gaussian per hour ahead).",
    ),
    TopicSpec(
        name=POOL_STATUS_TOPIC,
        key_field="pool",
        payload_types=(PoolStatus,),
        partitions=3,
        retention_ms=None,
        compacted=True,
        description="Per-pool scheduler status for the quota (compacted: the latest per pool).",
    ),
    TopicSpec(
        name=POOL_DEMAND_TOPIC,
        key_field="pool",
        payload_types=(PoolDemandLevel,),
        partitions=3,
        # As the task topics: a forecast stream rebuilt without its changelogs reads its history
        # here (the servable series is the preemption service's, not derivable from task events).
        retention_ms=TASK_RETENTION_MS,
        compacted=False,
        description="Per-pool servable HP demand per tenant after each pass that changed it (the "
        "series the forecast stream forecasts).",
    ),
    TopicSpec(
        name=QUOTAS_TOPIC,
        key_field="pool",
        payload_types=(SpotQuota,),
        partitions=3,
        retention_ms=None,
        compacted=True,
        description="Current spot quota per pool (compacted: the latest message per pool is the state).",
    ),
    TopicSpec(
        name=BIND_TOPIC,
        key_field="node",
        payload_types=(BindCommand,),
        partitions=6,
        retention_ms=7 * _DAY_MS,
        compacted=False,
        description="Start a task's workers on a node.",
    ),
    TopicSpec(
        name=EVICT_TOPIC,
        key_field="node",
        payload_types=(EvictCommand, WarnCommand),
        partitions=6,
        retention_ms=7 * _DAY_MS,
        compacted=False,
        description="Evict tasks from a node, or warn them to checkpoint (idempotent by command_id).",
    ),
    TopicSpec(
        name=EVICT_ACK_TOPIC,
        key_field="node",
        payload_types=(EvictAck,),
        partitions=6,
        retention_ms=7 * _DAY_MS,
        compacted=False,
        description="Node agents' answers to eviction commands.",
    ),
    TopicSpec(
        name=WORKER_ACK_TOPIC,
        key_field="node",
        payload_types=(WorkerStarted, WorkerExited),
        partitions=6,
        retention_ms=7 * _DAY_MS,
        compacted=False,
        description="Node agents' per-worker reports: started (pid), exited (exit code).",
    ),
    TopicSpec(
        name=CLOCK_TOPIC,
        key_field="clock",
        payload_types=(ClockTick,),
        partitions=1,
        retention_ms=_DAY_MS,
        compacted=False,
        description=(
            "Controllable clock: ticks a driver publishes for reproducible replays (schemas/clock.py)."
        ),
    ),
    TopicSpec(
        name=CLOCK_ACK_TOPIC,
        key_field="clock",
        payload_types=(ClockAck,),
        partitions=1,
        retention_ms=_DAY_MS,
        compacted=False,
        description="Components' answers to clock ticks (node agents: which workers exited).",
    ),
    TopicSpec(
        name=DEAD_LETTER_TOPIC,
        key_field="source_topic",
        payload_types=(DeadLetter,),
        partitions=1,
        retention_ms=30 * _DAY_MS,
        compacted=False,
        description="Records a consumer could not decode or handle, with their origin.",
    ),
)


def topic(name: str) -> TopicSpec:
    """The registered topic called `name`; KeyError naming the known topics otherwise."""
    for spec in TOPICS:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown topic {name!r}; registered topics: {', '.join(s.name for s in TOPICS)}")


@cache
def _topics_by_event_type() -> dict[str, TopicSpec]:
    # Built on first use (not at import) from the static registry; each payload type lives on
    # exactly one topic, which tests/contract checks.
    return {event_type: spec for spec in TOPICS for event_type in spec.event_types()}


def topic_for_event_type(event_type: str) -> TopicSpec:
    """The topic that carries `event_type`; KeyError if no topic does."""
    try:
        return _topics_by_event_type()[event_type]
    except KeyError:
        raise KeyError(f"no registered topic carries event_type {event_type!r}") from None


def encode(env: Envelope[Any]) -> bytes:
    """Compact UTF-8 JSON of the envelope (the Kafka record value)."""
    return env.model_dump_json().encode("utf-8")


def key_of(env: Envelope[Any]) -> bytes:
    """The Kafka key: the value of the payload's key field (per the registry), UTF-8 encoded."""
    spec = topic_for_event_type(env.event_type)
    return str(getattr(env.payload, spec.key_field)).encode("utf-8")


def decode(topic_name: str, raw: bytes) -> Envelope[Any]:
    """Parse and validate a record value read from `topic_name` (schemas/decoding.py has how).

    The envelope is validated against the payload type its `event_type` names, which must be one
    of the topic's payload types. Raises `json.JSONDecodeError`/`UnicodeDecodeError` (both
    ValueError) for bytes that are not JSON text, and `pydantic.ValidationError` for anything
    else; every validation error's location names the offending field (e.g. payload.workers).
    """
    return decode_for(topic(topic_name), raw)
