"""The decider's collaborators alone (services/preemption/decider/), each over fakes of what it is
handed: the registry of held partitions, the hearing of the input, the dead letters, the traces,
the node keys and the reader of a batch. The whole decider runs in the integration tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider

from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.services.platform.clock import ManualClock
from gfs.services.platform.signing import node_key
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.dead_letters import UNMATCHED, DeadLetters
from gfs.services.preemption.decider.hearing import Hearing
from gfs.services.preemption.decider.node_keys import NodeKeys
from gfs.services.preemption.decider.partition import OwnedPartitions, PartitionState
from gfs.services.preemption.decider.reading import Reader
from gfs.services.preemption.decider.traces import TaskTraces
from gfs.services.preemption.journal import store
from gfs.services.preemption.journal.entries import NodeSeenEntry, SubmitEntry
from gfs.services.preemption.journal.inputs import apply, entry_for
from gfs.services.preemption.router.handoff import Handoff
from gfs.services.preemption.service_settings import PreemptionSettings

T0 = 1_800_000_000.0
POOL = "A100"
SETTINGS = PreemptionSettings()


def _state(partition: int = 0, next_offset: int = 0) -> PartitionState:
    claim = store.Claim(partition=partition, epoch=1, next_offset=next_offset)
    return PartitionState(claim, next_offset=next_offset)


@dataclass
class _Counter:
    """An OpenTelemetry counter stand-in: what was added, with its attributes."""

    added: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    def add(self, amount: int, attributes: dict[str, str]) -> None:
        self.added.append((amount, attributes))


# ----- the registry of held partitions ---------------------------------------------------------------
def test_the_registry_holds_releases_and_drops_a_fenced_partition() -> None:
    stats = Stats()
    partitions = OwnedPartitions("unit", stats)
    first, second = _state(0), _state(3)
    partitions.hold(first)
    partitions.hold(second)
    first.controller(POOL, SETTINGS)
    assert sorted(partitions) == [0, 3] and 3 in partitions and partitions.get(3) is second
    assert list(partitions.pools()) == [POOL]
    partitions.fenced(second)
    assert sorted(partitions) == [0] and stats.fenced == 1
    assert partitions.release(0) is first and partitions.release(0) is None
    assert len(partitions) == 0


def test_a_pools_controller_is_made_once_with_the_claims_salt() -> None:
    state = _state()
    made = state.controller(POOL, SETTINGS)
    assert state.controller(POOL, SETTINGS) is made and made.id_salt != ""
    apply(made, NodeSeenEntry(node="n0", gpus=2, at=T0))
    assert state.pool_of_task("nobody") == ""


# ----- how far the input was heard -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("partition_heard", "router_heard", "expected"),
    [(None, T0, None), (T0, None, None), (T0, T0 - 5, T0 - 5), (T0 - 5, T0, T0 - 5)],
    ids=["partition-unknown", "router-unknown", "router-behind", "partition-behind"],
)
def test_the_input_is_heard_up_to_the_older_of_the_partition_and_the_router(
    partition_heard: float | None, router_heard: float | None, expected: float | None
) -> None:
    hearing = Hearing(SETTINGS, lambda: router_heard, Stats(), Instruments())
    state = _state()
    state.heard = partition_heard
    assert hearing.heard(state) == expected


def test_a_lagging_partition_is_heard_up_to_its_newest_record_and_never_back() -> None:
    hearing = Hearing(SETTINGS, lambda: T0 + 100, Stats(), Instruments())
    state = _state()
    hearing.note(state, None)  # lagging, nothing read yet: not known
    assert state.heard is None
    state.newest = T0
    hearing.note(state, None)
    assert state.heard == T0
    hearing.note(state, T0 + 10)  # read to its end
    hearing.note(state, T0 + 5)  # an older fetch time never moves it back
    assert state.heard == T0 + 10


def test_nothing_is_lost_and_nothing_reconciled_before_the_router_has_heard() -> None:
    hearing = Hearing(SETTINGS, lambda: None, Stats(), Instruments())
    state = _state()
    state.heard = T0
    ctl = state.controller(POOL, SETTINGS)
    apply(ctl, NodeSeenEntry(node="n0", gpus=2, at=T0))
    state.last_seen["n0"] = T0 - 10_000  # silent for long
    assert hearing.lost_nodes(state, T0) == []
    assert not hearing.current(state, T0)


# ----- dead letters and refusals ---------------------------------------------------------------------
def _record(offset: int, value: bytes = b"", *, key: bytes = POOL.encode(), timestamp: int = 0) -> Any:
    return ConsumerRecord(
        topic="inbox", partition=0, offset=offset, timestamp=timestamp, timestamp_type=0, key=key,
        value=value, checksum=None, serialized_key_size=len(key), serialized_value_size=len(value),
        headers=(),
    )  # fmt: skip


async def test_refusals_are_counted_by_reason_without_a_producer() -> None:
    stats, instruments = Stats(), Instruments(refused_counter=_Counter())
    letters = DeadLetters(SETTINGS, None, stats, instruments)
    cancel = TaskCancelled(task_id="t", tenant="org-a", reason="x")
    await letters.refuse(_record(1), cancel, "no such command", reason=UNMATCHED)
    letters.note_refused(cancel, "signature_mismatch")
    await letters.dead_letter(_record(2), ValueError("bad bytes"))
    assert (stats.refused_acks, stats.unauthenticated, stats.dead_lettered) == (2, 1, 1)
    assert [a["reason"] for _, a in instruments.refused_counter.added] == [UNMATCHED, "signature_mismatch"]


# ----- traces ----------------------------------------------------------------------------------------
def _submit(tid: str, carrier: dict[str, str] | None = None) -> SubmitEntry:
    task = TaskSubmitted(task_id=tid, tenant="org-a", gpu_model=POOL, gpus_per_worker=1, workers=1,
                         task_class=TaskClass.HP, command=("gfs", "fake-task"))  # fmt: skip
    entry = entry_for(task, T0, trace=carrier)
    assert isinstance(entry, SubmitEntry)
    return entry


def test_a_submissions_context_is_remembered_live_or_from_its_carrier_and_survives_a_snapshot() -> None:
    traces = TaskTraces()
    with TracerProvider().get_tracer("unit").start_as_current_span("submit") as span:
        live = otel_context.get_current()
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=live)
    assert traces.remember(_submit("live"), live) == ("live",)
    assert traces.remember(_submit("replayed", carrier)) == ("replayed",)  # a replay: the carrier
    assert traces.remember(_submit("untraced")) == ()  # no context and no carrier
    assert traces.remember(NodeSeenEntry(node="n0", gpus=2, at=T0), live) == ()  # not a submission
    assert traces.parent("live", None) is live and traces.parent("", live) is live
    state = _state()
    ctl = state.controller(POOL, SETTINGS)
    apply(ctl, NodeSeenEntry(node="n0", gpus=2, at=T0))
    apply(ctl, _submit("live"))
    restored = TaskTraces()
    restored.restore(traces.carriers([ctl]))
    trace_id = trace.get_current_span(restored.contexts["live"]).get_span_context().trace_id
    assert list(restored.contexts) == ["live"] and trace_id == span.get_span_context().trace_id


def test_a_quota_without_a_valid_span_links_nothing() -> None:
    traces = TaskTraces()
    traces.note_quota(POOL, otel_context.get_current())  # no span in force
    assert traces.quota_spans == {}


# ----- node keys -------------------------------------------------------------------------------------
def test_a_nodes_key_is_the_signing_key_of_the_secret_derived_once() -> None:
    keys = NodeKeys(b"unit-secret-0123456789")
    first = keys.key("n0")
    assert first == node_key(b"unit-secret-0123456789", "n0") and keys.key("n0") is first


# ----- reading a batch -------------------------------------------------------------------------------
def _telemetry(node: str, at: float) -> NodeTelemetry:
    gpu = GpuSample(index=0, utilisation_pct=0.0, memory_used_mib=0.0, memory_total_mib=80_000.0)
    return NodeTelemetry(node=node, gpu_model=POOL, sampled_at=datetime.fromtimestamp(at, UTC), gpus=(gpu,))


async def test_a_batch_skips_what_was_committed_and_a_known_nodes_heartbeat_stays_in_memory() -> None:
    handoff = Handoff(owned=lambda _partition: True)
    stats = Stats()
    reader = Reader(
        SETTINGS, ManualClock(T0), handoff, None, DeadLetters(SETTINGS, None, stats, Instruments()),
        stats, Instruments(),
    )  # fmt: skip
    state = _state(next_offset=5)
    apply(state.controller(POOL, SETTINGS), NodeSeenEntry(node="known", gpus=1, at=T0 - 10))
    sent = {4: _telemetry("new", T0), 5: _telemetry("known", T0), 6: _telemetry("new", T0)}
    for offset, sample in sent.items():
        handoff.put(0, offset, wrap(sample, producer="unit"))
    ms = int(T0 * 1000)
    reading = await reader.read(state, [_record(o, b"", timestamp=ms) for o in sent])
    # 4: committed already; 5: a heartbeat of a node the pool knows (memory only); 6: a new node.
    assert [(pool, type(entry).__name__) for pool, entry, _, _ in reading.items] == [(POOL, "NodeSeenEntry")]
    assert reading.acks == {} and reading.now == T0
    assert state.last_seen == {"known": T0, "new": T0} and state.newest == T0
    assert handoff.handed == 2 and stats.dead_lettered == 0


async def test_a_record_that_does_not_decode_is_dead_lettered() -> None:
    stats = Stats()
    reader = Reader(
        SETTINGS, ManualClock(T0), Handoff(owned=lambda _partition: False), None,
        DeadLetters(SETTINGS, None, stats, Instruments()), stats, Instruments(),
    )  # fmt: skip
    reading = await reader.read(_state(), [_record(0, b"not an envelope")])
    assert reading.items == [] and stats.dead_lettered == 1
