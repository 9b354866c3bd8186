"""The agent's controllable clock (`agent_clock = "topic"`, env GFS_AGENT_CLOCK=topic).

The agent's "now" is the `at` of the last ClockTick ADVANCE it handled (the wall clock before the
first). The agent hands that time to its workers through one file per agent, `<state_dir>/sim-clock`
(text: `repr` of the epoch seconds, replaced atomically, so a reader sees the old or the new value,
never a torn one). A worker that follows it (`gfs fake-task` with GFS_SIM_CLOCK_FILE) answers
through its own clock-seen file, `{"seen": <epoch s>, "exit_at": <epoch s> | null}`, written after
it has acted on the time it saw (checkpoints taken), so "seen >= at" means "done with instant at".

`fake_task` writes these files with its own few lines (it imports nothing of the package, to
start as a bare interpreter); the formats above are the contract between the two.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SIM_CLOCK_FILE = "sim-clock"
SEEN_DIR = "clock-seen"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` (temp file + rename). No fsync: this is about readers never
    seeing a half-written file, not about surviving a power cut (the next tick rewrites it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class Seen:
    """A worker's clock-seen file: the last instant it handled, and when it will exit by itself
    (None: not by itself, it works until stopped)."""

    seen: float
    exit_at: float | None


def read_seen(path: Path) -> Seen | None:
    """The clock-seen file at `path`, or None when it is missing or not (yet) readable."""
    try:
        data = json.loads(path.read_text())
        exit_at = data.get("exit_at")
        return Seen(float(data["seen"]), None if exit_at is None else float(exit_at))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


class SimClock:
    """The agent's "now" in topic mode, and the files that share it with the workers."""

    def __init__(self, state_dir: Path, wall: Callable[[], datetime], name: str = "clock") -> None:
        self.name = name  # the ClockTick.clock followed; other clocks' ticks are not ours
        self.path = state_dir / SIM_CLOCK_FILE
        self.seen_dir = state_dir / SEEN_DIR
        self._wall = wall
        self._at: datetime | None = None  # None until the first ADVANCE: the wall clock rules
        self.last_sequence: int | None = None

    def now(self) -> datetime:
        return self._wall() if self._at is None else self._at

    def epoch(self) -> float:
        return self.now().timestamp()

    def is_new(self, sequence: int) -> bool:
        """A tick not handled yet. Sequences grow by one per tick on a one-partition topic, so
        anything at or below the last handled one is a repeat (a producer retry, a re-read)."""
        return self.last_sequence is None or sequence > self.last_sequence

    def handled(self, sequence: int) -> None:
        self.last_sequence = sequence

    def move_to(self, at: datetime) -> float:
        """Set the time to `at` and publish it to the workers; returns it in epoch seconds."""
        self._at = at
        epoch = at.timestamp()
        write_atomic(self.path, repr(epoch))
        return epoch

    def seen_file(self, command_id: object, worker_index: int) -> Path:
        return self.seen_dir / f"{command_id}.{worker_index}.json"


def epoch_to_utc(epoch: float) -> datetime:
    """Epoch seconds back to an aware datetime (rounded to the microsecond, like the tick's own)."""
    if not math.isfinite(epoch):
        raise ValueError(f"not a finite instant: {epoch!r}")
    return datetime.fromtimestamp(epoch, UTC)
