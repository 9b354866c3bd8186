"""What leaves the decider through the outbox: each command signed with its node's key, each
message wrapped in its envelope, carrying the trace of its task (a span per command, the decision
SREs follow; a spot bind's span links to the quota that admitted it).

`Outgoing` owns no state: it reads the node keys and the traces it is handed, and the clock that
dates an envelope (on the controllable clock an event happened at the replay's time).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from pydantic import BaseModel

from gfs.schemas.commands import BindCommand, EvictCommand, WarnCommand
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import TaskClass
from gfs.schemas.topics import topic_for_event_type
from gfs.services.platform.clock import Clock, TickClock
from gfs.services.platform.signing import sign
from gfs.services.platform.tracing import inject_headers
from gfs.services.preemption.decider.names import PRODUCER
from gfs.services.preemption.decider.node_keys import NodeKeys
from gfs.services.preemption.decider.traces import TaskTraces


class Outgoing:
    __slots__ = ("_clock", "_keys", "_traces")

    def __init__(self, keys: NodeKeys, traces: TaskTraces, clock: Clock) -> None:
        self._keys = keys
        self._traces = traces
        self._clock = clock

    def envelope(
        self,
        tracer: trace.Tracer,
        message: BaseModel,
        ctx: otel_context.Context | None,
        quota: trace.SpanContext | None = None,
    ) -> tuple[str, Envelope[Any], list[tuple[str, bytes]]]:
        """Sign a command, wrap it, and carry the trace of its task (a span of that trace); a spot
        bind's span links to the span of the quota in force (`quota`), which admitted it. The
        topic, the envelope and its headers."""
        task_id = task_of(message)
        parent = self._traces.parent(task_id, ctx)
        if isinstance(message, BindCommand):  # noqa: SIM114 (`sign` keeps each command's own type)
            message = sign(message, key=self._keys.key(message.node))
        elif isinstance(message, EvictCommand):  # noqa: SIM114
            message = sign(message, key=self._keys.key(message.node))
        elif isinstance(message, WarnCommand):
            message = sign(message, key=self._keys.key(message.node))
        if isinstance(message, BindCommand | EvictCommand | WarnCommand):
            # A span per command (the decision SREs follow); events carry the task's trace as is.
            spot = isinstance(message, BindCommand) and message.task_class is TaskClass.SPOT
            links = [trace.Link(quota, {"gfs.link": "admitted by the spot quota"})] if spot and quota else []
            with tracer.start_as_current_span(
                f"decide {type(message).__name__}", context=parent, links=links,
                attributes={"gfs.task_id": task_id, "gfs.node": message.node},
            ):  # fmt: skip
                headers = inject_headers()
        else:
            headers = inject_headers(context=parent) if parent is not None else []
        # On the controllable clock an event happened at the replay's time, not the host's.
        clock = self._clock
        occurred = (
            datetime.fromtimestamp(clock.now(), UTC) if isinstance(clock, TickClock) else datetime.now(UTC)
        )
        envelope = wrap(message, producer=PRODUCER, occurred_at=occurred)
        return topic_for_event_type(type(message).__name__).name, envelope, headers


def task_of(message: BaseModel) -> str:
    """The task a message is about ("" if none): an eviction's first task, else its `task_id`."""
    if isinstance(message, EvictCommand):
        return message.task_ids[0]
    value = getattr(message, "task_id", "")
    return value if isinstance(value, str) else ""
