"""The controllable clock: ticks that move every service's notion of "now", and the agents' answers.

In normal operation every service reads the wall clock. For sim/live parity (and any replay that
must be reproducible) a driver publishes `ClockTick`s on gfs.control.clock instead, and the
services started with `--clock topic` take the latest tick as their time. One instant `at` is
played in phases, each published only after the pipeline settled from the one before:

- ADVANCE: time moves to `at`. Timers due by `at` fire (guarantee periods close, held binds pass
  their deadline); node agents move their workers' clock, so fake tasks due by `at` exit, and
  answer with a `ClockAck` once every worker either exited or saw the new time; the forecast stream
  closes the minutes and hours before `at`.
- STATUS: the preemption service publishes each pool's status at `at` (the quota service computes
  the quota for that instant from it).
- PASS: each pool runs one scheduling pass at `at`.

Keyed by the clock's name on a one-partition topic, so every reader sees one total order; a
service follows the clock named in its settings (default `clock`) and ignores ticks of others, so
two replays sharing a broker do not move each other's services.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from gfs.schemas.fields import ShortName, UtcDatetime, WorkerRef

_CONTRACT = ConfigDict(extra="forbid", frozen=True)

CLOCK_KEY = "clock"


class ClockPhase(enum.StrEnum):
    ADVANCE = "ADVANCE"
    STATUS = "STATUS"
    PASS = "PASS"


class ClockTick(BaseModel):
    """The time is now `at` (phase says what to do at it). Keyed by `clock` on gfs.control.clock."""

    model_config = _CONTRACT

    clock: ShortName = Field(
        description="The clock's name (the Kafka key); a reader follows one clock and ignores others.",
    )
    at: UtcDatetime = Field(description="The instant being played.")
    sequence: int = Field(ge=0, description="Increases by one per tick; a reader ignores one it saw.")
    phase: ClockPhase = Field(description="ADVANCE, STATUS or PASS (module doc).")


class ClockAck(BaseModel):
    """A component finished handling a tick. Keyed by `clock` on gfs.control.clock-acks."""

    model_config = _CONTRACT

    clock: ShortName = Field(description="The clock answered (the Kafka key).")
    component: ShortName = Field(description="Who answers, e.g. node-agent/gpu-3.")
    sequence: int = Field(ge=0, description="The tick answered.")
    at: UtcDatetime = Field(description="The tick's instant.")
    exited: tuple[WorkerRef, ...] = Field(
        default=(), description="Node agents: '<task>/<worker>' of every worker that exited at this tick."
    )
    next_exit_at: UtcDatetime | None = Field(
        default=None,
        description="Node agents: the earliest instant one of its running workers will exit by itself.",
    )
