"""The inbox records the decider does not apply, each published to the dead-letter topic with the
reason (by the platform's publisher; without a producer it is only logged and counted):
- records it cannot decode (the router validated them: a bug or tampering);
- records that failed to store twice (poison.py), so one record never stops a partition;
- reports it refuses: acks and telemetry not signed by their node (report_auth.py), and acks that
  do not match the command they claim to answer (`UNMATCHED`).

`DeadLetters` owns the producer of the letters and counts them (`Stats`, the refusal instrument);
the router counts the telemetry it refuses here too (`note_refused`).
"""

from __future__ import annotations

import logging

from aiokafka import ConsumerRecord
from pydantic import BaseModel

from gfs.services.platform.kafka.dead_letter import DeadLetterPublisher, Refused
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.names import LOGGER, PRODUCER
from gfs.services.preemption.service_settings import PreemptionSettings

log = logging.getLogger(LOGGER)

UNMATCHED = "unmatched"  # the refusal reason of an ack that does not match its command


class DeadLetters:
    __slots__ = ("instruments", "producer", "settings", "stats")

    def __init__(
        self,
        settings: PreemptionSettings,
        producer: EnvelopeProducer | None,
        stats: Stats,
        instruments: Instruments,
    ) -> None:
        self.settings = settings
        self.producer = producer  # None: letters are logged and counted, not published
        self.stats = stats
        self.instruments = instruments

    async def dead_letter(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> None:
        """A record the decider cannot apply (`exc` says why)."""
        self.stats.dead_lettered += 1
        log.error("preemption: dead-lettered inbox record %d@%d: %r", record.partition, record.offset, exc)
        await self._publish(record, exc)

    def note_refused(self, message: BaseModel, reason: str) -> None:
        """Count a refused ack or sample (also the router's: it refuses unsigned telemetry)."""
        self.stats.refused_acks += 1
        if reason != UNMATCHED:
            self.stats.unauthenticated += 1
        if self.instruments.refused_counter is not None:
            self.instruments.refused_counter.add(1, {"type": type(message).__name__, "reason": reason})

    async def refuse(
        self, record: ConsumerRecord[bytes, bytes], report: BaseModel, why: str, *, reason: str
    ) -> None:
        """A report refused for `reason` (`why`: the details): counted, logged, dead-lettered."""
        self.note_refused(report, reason)
        what = getattr(report, "command_id", None) or getattr(report, "node", "")
        log.warning("preemption: refused %s %s (%s): %s", type(report).__name__, what, reason, why)
        await self._publish(record, Refused(reason, f"{type(report).__name__} refused: {why}"))

    async def _publish(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> None:
        """The letter of an inbox record, by the platform's publisher (none without a producer)."""
        if self.producer is not None:
            letters = DeadLetterPublisher(
                sink=self.producer, consumer_group=self.settings.preemption_group, producer=PRODUCER
            )
            await letters.publish(record, exc)
