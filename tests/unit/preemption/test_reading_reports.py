"""Which node reports of their workers the decider journals (reading.py, issue 38): on the
receiver's clock, so an agent whose clock ran ahead once is not frozen out, and at least every
`unknown_after_s`, so unknown work is stopped after that delay and not after the journaling period.

A known node "n0" of pool A100; each record is forwarded (its Kafka timestamp) at the time given.
"""

from __future__ import annotations

from datetime import UTC, datetime

from test_decider_parts import POOL, T0, _record, _state

from gfs.schemas.envelope import wrap
from gfs.schemas.telemetry import GpuSample, NodeTelemetry, RunningWorker
from gfs.services.platform.clock import ManualClock
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.dead_letters import DeadLetters
from gfs.services.preemption.decider.partition import PartitionState
from gfs.services.preemption.decider.reading import Reader
from gfs.services.preemption.journal.entries import NodeReportEntry, NodeSeenEntry
from gfs.services.preemption.journal.inputs import apply
from gfs.services.preemption.router.handoff import Handoff
from gfs.services.preemption.service_settings import PreemptionSettings


class _Node:
    """One known node's heartbeats through a Reader, each journaled report applied as the decider
    would (so the next read compares with it)."""

    def __init__(self, settings: PreemptionSettings) -> None:
        self.settings = settings
        self.handoff = Handoff(owned=lambda _partition: True)
        self.clock = ManualClock(T0)
        stats = Stats()
        letters = DeadLetters(settings, None, stats, Instruments())
        self.reader = Reader(settings, self.clock, self.handoff, None, letters, stats, Instruments())
        self.state: PartitionState = _state()
        self.controller = self.state.controller(POOL, settings)
        apply(self.controller, NodeSeenEntry(node="n0", gpus=1, at=T0 - 10))
        self.offset = 0

    async def heartbeat(
        self, forwarded: float, sampled: float, running: tuple[str, ...]
    ) -> list[NodeReportEntry]:
        """A heartbeat sampled at `sampled` (the agent's clock) listing `running` (task ids, attempt
        1, worker 0), read at `forwarded`; the reports journaled (and applied)."""
        gpu = GpuSample(index=0, utilisation_pct=0.0, memory_used_mib=0.0, memory_total_mib=80_000.0)
        sample = NodeTelemetry(
            node="n0", gpu_model=POOL, sampled_at=datetime.fromtimestamp(sampled, UTC), gpus=(gpu,),
            running=tuple(RunningWorker(task_id=t, attempt=1, worker_index=0) for t in running),
        )  # fmt: skip
        self.offset += 1
        self.clock.set(forwarded)
        self.handoff.put(0, self.offset, wrap(sample, producer="unit"))
        record = _record(self.offset, b"", timestamp=int(forwarded * 1000))
        reading = await self.reader.read(self.state, [record])
        self.state.next_offset = self.offset + 1
        reports = [entry for _, entry, _, _ in reading.items if isinstance(entry, NodeReportEntry)]
        for entry in reports:
            apply(self.controller, entry)
        return reports


async def test_a_report_stamped_ahead_is_journaled_at_the_receivers_time_and_later_ones_too() -> None:
    node = _Node(PreemptionSettings(preemption_max_clock_skew_s=5.0))
    # The agent's clock runs an hour ahead once (then an NTP step puts it right).
    (first,) = await node.heartbeat(T0, T0 + 3600.0, ("a",))
    assert first.report.sampled_at == T0  # clamped to when it was forwarded
    # Its next report, on the right clock, says something new: journaled, not taken for an old one.
    (second,) = await node.heartbeat(T0 + 2.0, T0 + 2.0, ("b",))
    assert second.report.sampled_at == T0 + 2.0 and second.report.attempts() == {("b", 1)}
    # A report stamped far behind counts as at most the skew old.
    (third,) = await node.heartbeat(T0 + 9.0, T0 - 600.0, ())
    assert third.report.sampled_at == T0 + 9.0 - 5.0


async def test_an_unchanged_report_is_journaled_every_unknown_after_s_when_that_is_shorter() -> None:
    settings = PreemptionSettings(preemption_report_every_s=60.0, preemption_unknown_work_after_s=2.0)
    node = _Node(settings)
    assert len(await node.heartbeat(T0, T0, ("a",))) == 1  # new: journaled at once
    assert await node.heartbeat(T0 + 1.0, T0 + 1.0, ("a",)) == []  # unchanged, 1 s old: memory only
    (again,) = await node.heartbeat(T0 + 2.0, T0 + 2.0, ("a",))  # unchanged, 2 s old: journaled
    assert again.report.sampled_at == T0 + 2.0
    # With the journaling period the shorter one, it rules.
    node = _Node(PreemptionSettings(preemption_report_every_s=3.0, preemption_unknown_work_after_s=60.0))
    assert len(await node.heartbeat(T0, T0, ("a",))) == 1
    assert await node.heartbeat(T0 + 2.0, T0 + 2.0, ("a",)) == []
    assert len(await node.heartbeat(T0 + 3.0, T0 + 3.0, ("a",))) == 1
