"""`gfs fake-task` on a simulated clock: the arithmetic against hand-worked numbers, then real
processes driven through their clock file (eviction, restart with overhead, natural exit).

Hand-worked reference (duration 1000 s, checkpoint every 300 s, overhead 40 s on the restart):
- first start at 0: need = 1000 + 0 = 1000, exits at 1000 unless stopped; checkpoints at 300
  (remaining 700) and 600 (remaining 400).
- evicted at 700: the state holds 400 (the 100 s since 600 are lost). Restart at 800 with overhead
  40: need = 440, exits at 800 + 440 = 1240; one checkpoint at 1100 (remaining 140).
  The simulator agrees: remaining_after_eviction(1000, 700, 300, 40) = 1000 - 700 + 100 + 40 = 440.
- evicted at 250 instead (no checkpoint yet): the state still holds 1000; restart need 1040.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gfs.services.core.guarantee import remaining_after_eviction
from gfs.services.node_agent.fake_task import (
    read_sim_state,
    sim_checkpoints,
    sim_finished,
    sim_need,
    sim_remaining,
)

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 10.0
# 2026-01-01T00:00:00Z: 56 years of 365 days + 14 leap days (1972..2024) = 20454 days x 86400 s.
EPOCH_2026 = 1_767_225_600.0


# The arithmetic -------------------------------------------------------------------------------


def test_need_is_the_remaining_work_plus_the_overhead() -> None:
    assert sim_need(1000.0, 0.0) == 1000.0
    assert sim_need(400.0, 40.0) == 440.0
    assert sim_need(None, 40.0) == math.inf  # no duration: runs until stopped


@pytest.mark.parametrize(
    ("start", "need", "interval", "now", "checkpoints", "remaining"),
    [
        (0.0, 1000.0, 300.0, 0.0, 0, 1000.0),
        (0.0, 1000.0, 300.0, 250.0, 0, 1000.0),  # evicted at 250: nothing saved
        (0.0, 1000.0, 300.0, 299.999, 0, 1000.0),
        (0.0, 1000.0, 300.0, 300.0, 1, 700.0),  # a checkpoint at its instant counts
        (0.0, 1000.0, 300.0, 700.0, 2, 400.0),  # evicted at 700: 600's checkpoint
        (0.0, 1000.0, 300.0, 900.0, 3, 100.0),
        (0.0, 1000.0, 300.0, 5000.0, 3, 100.0),  # 1200 is past the end: no 4th
        (0.0, 600.0, 300.0, 600.0, 1, 300.0),  # 600 is the end: it finishes, no checkpoint there
        (800.0, 440.0, 300.0, 1099.0, 0, 440.0),  # the restart: need 440 from 800
        (800.0, 440.0, 300.0, 1100.0, 1, 140.0),
        (800.0, 440.0, 300.0, 1239.0, 1, 140.0),
        (0.0, 1000.0, None, 700.0, 0, 1000.0),  # no periodic checkpoints
        (100.0, 1000.0, 300.0, 50.0, 0, 1000.0),  # a clock before the start
    ],
)
def test_periodic_checkpoints_and_what_they_leave(
    start: float, need: float, interval: float | None, now: float, checkpoints: int, remaining: float
) -> None:
    assert sim_checkpoints(start, need, interval, now) == checkpoints
    assert sim_remaining(need, interval, checkpoints) == remaining


def test_epoch_instants_from_ticks_land_on_their_checkpoint_and_exit() -> None:
    # A start and ticks at fractional instants: the floats differ in the last bits, the instants
    # are the same microsecond.
    start = datetime(2026, 1, 1, 0, 0, 0, 300000, tzinfo=UTC).timestamp()
    assert start == pytest.approx(EPOCH_2026 + 0.3, abs=1e-6)
    at_300 = datetime(2026, 1, 1, 0, 5, 0, 300000, tzinfo=UTC).timestamp()
    at_600 = datetime(2026, 1, 1, 0, 10, 0, 300000, tzinfo=UTC).timestamp()
    assert sim_checkpoints(start, 600.0, 300.0, at_300) == 1
    assert sim_checkpoints(start, 600.0, 300.0, at_300 - 0.001) == 0
    assert sim_finished(at_600, start + 600.0)
    assert not sim_finished(at_600 - 0.001, start + 600.0)


def test_the_hand_worked_restart_matches_the_simulator() -> None:
    assert remaining_after_eviction(1000.0, 700.0, 300.0, 40.0) == 440.0
    assert sim_need(sim_remaining(1000.0, 300.0, sim_checkpoints(0.0, 1000.0, 300.0, 700.0)), 40.0) == 440.0
    assert remaining_after_eviction(1000.0, 250.0, 300.0, 40.0) == 1040.0
    assert sim_need(sim_remaining(1000.0, 300.0, sim_checkpoints(0.0, 1000.0, 300.0, 250.0)), 40.0) == 1040.0


def test_the_state_file_reads_back(tmp_path: Path) -> None:
    assert read_sim_state(None) == (False, None)
    assert read_sim_state(tmp_path) == (False, None)
    (tmp_path / "sim-state.json").write_text('{"remaining": 400.0}')
    assert read_sim_state(tmp_path) == (True, 400.0)
    (tmp_path / "sim-state.json").write_text('{"remaining": null}')
    assert read_sim_state(tmp_path) == (True, None)


# Real processes ------------------------------------------------------------------------------


class SimTask:
    """One fake-task process on a clock file the test moves."""

    def __init__(self, tmp: Path, *args: str, start: float | None, overhead: float | None = None) -> None:
        self.clock = tmp / "sim-clock"
        self.seen = tmp / "seen.json"
        self.state = tmp / "ckpt" / "sim-state.json"
        self.log = tmp / "task.log"
        self.seen.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "GFS_CLOCK_SEEN_FILE": str(self.seen)}
        for name in ("GFS_SIM_START", "GFS_RESTART_OVERHEAD_S", "GFS_SIM_CLOCK_FILE", "GFS_CHECKPOINT_DIR"):
            env.pop(name, None)
        if start is not None:
            env["GFS_SIM_START"] = repr(start)
        if overhead is not None:
            env["GFS_RESTART_OVERHEAD_S"] = repr(overhead)
        argv = [sys.executable, "-m", "gfs.services.node_agent.fake_task", "--sim-clock", str(self.clock)]
        argv += ["--checkpoint-dir", str(tmp / "ckpt"), *args]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def set_clock(self, at: float) -> None:
        tmp = self.clock.with_name(".sim-clock.tmp")
        tmp.write_text(repr(at))
        os.replace(tmp, self.clock)

    def read_seen(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.seen.read_text()))
        except (OSError, ValueError):
            return None

    def move(self, at: float) -> dict[str, Any] | None:
        """Set the clock, then wait until the task saw it (its seen file) or exited; the seen file
        then, or None when it exited."""
        self.set_clock(at)
        deadline = time.monotonic() + WAIT_S
        while True:
            seen = self.read_seen()
            if seen is not None and seen["seen"] >= at:
                return seen
            if self.process.poll() is not None:
                return None
            assert time.monotonic() < deadline, f"the task never saw {at}: {self.log.read_text()}"
            time.sleep(0.01)

    def remaining(self) -> float | None:
        value = json.loads(self.state.read_text())["remaining"]
        return None if value is None else float(value)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=WAIT_S)


@pytest.fixture
def tasks() -> Iterator[list[SimTask]]:
    started: list[SimTask] = []
    yield started
    for task in started:
        if task.process.poll() is None:
            task.process.kill()
            task.process.wait()


def test_evicted_after_two_checkpoints_then_restarted_with_the_overhead(
    tmp_path: Path, tasks: list[SimTask]
) -> None:
    first = SimTask(tmp_path, "--duration", "1000", "--checkpoint-s", "300", start=0.0)
    tasks.append(first)
    first.set_clock(0.0)
    assert first.move(0.0) == {"seen": 0.0, "exit_at": 1000.0}
    assert first.remaining() == 1000.0  # written at once: need = 1000 + 0
    first.move(299.0)
    assert first.remaining() == 1000.0
    first.move(300.0)
    assert first.remaining() == 700.0
    assert first.move(700.0) == {"seen": 700.0, "exit_at": 1000.0}
    assert first.remaining() == 400.0
    assert first.stop() == 0  # evicted at 700: the 100 s since 600 are lost
    assert first.remaining() == 400.0
    assert "checkpointed" in first.log.read_text()

    second = SimTask(tmp_path, "--duration", "1000", "--checkpoint-s", "300", "--exit-code", "5",
                     start=800.0, overhead=40.0)  # fmt: skip
    tasks.append(second)
    second.set_clock(800.0)
    assert second.move(800.0) == {"seen": 800.0, "exit_at": 1240.0}  # 800 + 400 + 40
    assert second.remaining() == 440.0
    second.move(1100.0)
    assert second.remaining() == 140.0
    assert second.move(1239.0) == {"seen": 1239.0, "exit_at": 1240.0}
    assert second.move(1240.0) is None  # exited at its instant
    assert second.process.wait(timeout=WAIT_S) == 5
    assert "finished exit_code=5" in second.log.read_text()


def test_evicted_before_any_checkpoint_restarts_with_all_the_work_and_the_overhead(
    tmp_path: Path, tasks: list[SimTask]
) -> None:
    first = SimTask(tmp_path, "--duration", "1000", "--checkpoint-s", "300", start=0.0)
    tasks.append(first)
    first.set_clock(0.0)
    first.move(250.0)
    assert first.stop() == 0
    assert first.remaining() == 1000.0
    # No GFS_SIM_START: the start is the clock file's value.
    second = SimTask(tmp_path, "--duration", "1000", "--checkpoint-s", "300", start=None, overhead=40.0)
    tasks.append(second)
    second.set_clock(2000.0)
    assert second.move(2000.0) == {"seen": 2000.0, "exit_at": 3040.0}
    assert second.remaining() == 1040.0


def test_a_jump_past_the_end_exits_at_once(tmp_path: Path, tasks: list[SimTask]) -> None:
    task = SimTask(tmp_path, "--duration", "600", "--checkpoint-s", "300", start=EPOCH_2026)
    tasks.append(task)
    task.set_clock(EPOCH_2026)
    assert task.move(EPOCH_2026) == {"seen": EPOCH_2026, "exit_at": EPOCH_2026 + 600.0}
    assert task.move(EPOCH_2026 + 3600.0) is None
    assert task.process.wait(timeout=WAIT_S) == 0
    assert task.remaining() == 300.0  # the checkpoint at +300 (+600 is the end, not a checkpoint)


def test_ignore_sigterm_still_works_on_the_sim_clock(tmp_path: Path, tasks: list[SimTask]) -> None:
    task = SimTask(tmp_path, "--duration", "600", "--ignore-sigterm", start=0.0)
    tasks.append(task)
    task.set_clock(0.0)
    task.move(0.0)
    task.process.send_signal(signal.SIGTERM)
    assert task.move(10.0) == {"seen": 10.0, "exit_at": 600.0}  # still working
    assert "sigterm ignored" in task.log.read_text()
