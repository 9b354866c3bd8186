"""`gfs fake-task`: a GPU-free worker for demos and tests
(also `python -m gfs.services.node_agent.fake_task`).

It "works" in small sleeps, writes progress, checkpoints every `--checkpoint-s` seconds and on
SIGTERM (then prints `checkpointed` and exits 0), and exits by itself after `--duration` seconds
with `--exit-code`. `--ignore-sigterm` makes it note the SIGTERM and go on working, so the agent's
grace period runs out and it has to SIGKILL. SIGUSR1 (the agent's reclaim warning, issue 27)
makes it checkpoint at once, print `checkpoint on warning` and go on working. On the simulated
clock it only prints `warning noted`: the simulator's arithmetic, which that mode follows exactly,
has no checkpoint on a warning (a warning changes no decision).

Simulated clock (env GFS_SIM_CLOCK_FILE, set by an agent in topic mode, or `--sim-clock FILE`):
time is the float in that file, and the task follows the simulator's arithmetic exactly
(services/core/guarantee.py `remaining_after_eviction`: work since the last periodic checkpoint is
lost on eviction, each start costs the restart overhead). State `<checkpoint dir>/sim-state.json`
`{"remaining": R}`; at start `need = (R if the file exists else --duration) + overhead`
(GFS_RESTART_OVERHEAD_S, default 0), `start = GFS_SIM_START` (else the clock file's value), and it
exits at `start + need`. The state is written as `need` at once, then `need - j*C` at each periodic
checkpoint `start + j*C` (C = --checkpoint-s / GFS_CHECKPOINT_INTERVAL_S; only `j*C < need`).
SIGTERM saves nothing more (progress since the last checkpoint is lost): it prints `checkpointed`
and exits 0. After handling each new time it writes GFS_CLOCK_SEEN_FILE: `{"seen": now,
"exit_at": start + need}` (null when it has no duration), which is how the agent knows it is done
with that instant (services/node_agent/sim_clock.py).

Only the standard library is imported: an agent may start hundreds of these at once (the
benchmark does), so start-up must cost a bare interpreter and nothing more.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

# Sleep granularity. The SIGTERM handler runs at once (Python interrupts the sleep for it), then
# the sleep resumes, so a stop takes at most one step; 0.1 s keeps hundreds of idle fake tasks
# on a small machine from waking thousands of times a second.
_STEP_S = 0.1
# Simulated clock: how often the clock file is looked at (a stat; read only when it changed). A
# driver waits for every worker to see each tick, so this bounds a tick's latency.
_SIM_POLL_S = 0.01
# Float slack when comparing instants: epoch seconds near 1.7e9 carry ~2e-7 s of rounding, and a
# tick's `at` and `start + need` are computed along different paths.
SIM_EPS = 1e-6
SIM_STATE_FILE = "sim-state.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeTaskOptions:
    duration_s: float | None = None  # None: work until stopped
    exit_code: int = 0
    ignore_sigterm: bool = False
    checkpoint_s: float | None = None
    checkpoint_dir: Path | None = None
    progress_file: Path | None = None
    env_file: Path | None = None
    # Simulated clock (module doc); None: the wall clock.
    sim_clock_file: Path | None = None
    sim_start: float | None = None
    clock_seen_file: Path | None = None
    restart_overhead_s: float = 0.0


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class _FakeTask:
    def __init__(self, options: FakeTaskOptions) -> None:
        self.options = options
        self.started = time.monotonic()
        self.steps = 0
        self.checkpoints = 0
        self.sigterm = False
        self.warned = False  # SIGUSR1 arrived: checkpoint at the next step (not inside the handler)

    def _say(self, line: str) -> None:
        # stdout is the worker's log (the agent redirects it); flush so the line is there at once.
        print(line, flush=True)
        if self.options.progress_file is not None:
            with self.options.progress_file.open("a") as out:
                out.write(line + "\n")

    def checkpoint(self) -> None:
        self.checkpoints += 1
        if self.options.checkpoint_dir is not None:
            state = {"steps": self.steps, "worked_s": round(time.monotonic() - self.started, 3)}
            _write_atomic(self.options.checkpoint_dir / "checkpoint.json", json.dumps(state))

    def on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        if self.options.ignore_sigterm:
            self._say("sigterm ignored")
            return
        self.sigterm = True

    def on_sigusr1(self, _signum: int, _frame: FrameType | None) -> None:
        self.warned = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGUSR1, self.on_sigusr1)
        if self.options.env_file is not None:
            _write_atomic(self.options.env_file, json.dumps(dict(os.environ), sort_keys=True))
        # Printed only once the handler is installed: a test that waits for it knows a SIGTERM
        # from now on is caught, not fatal.
        self._say(f"started pid={os.getpid()}")
        last_checkpoint = self.started
        duration = self.options.duration_s
        while not self.sigterm:
            now = time.monotonic()
            if duration is not None and now - self.started >= duration:
                self._say(f"finished exit_code={self.options.exit_code}")
                return self.options.exit_code
            period = self.options.checkpoint_s
            if self.warned:
                self.warned = False
                self.checkpoint()
                last_checkpoint = now
                self._say("checkpoint on warning")
            elif period is not None and now - last_checkpoint >= period:
                self.checkpoint()
                last_checkpoint = now
            time.sleep(_STEP_S)
            self.steps += 1
        self.checkpoint()
        self._say("checkpointed")
        return 0


# The simulated clock's arithmetic (pure, unit-tested against hand-worked numbers) ----------------


def sim_need(remaining: float | None, overhead_s: float) -> float:
    """Seconds this start must run: the work left (None: no end) plus the start's overhead."""
    return math.inf if remaining is None else remaining + overhead_s


def sim_checkpoints(start: float, need: float, interval: float | None, now: float) -> int:
    """How many periodic checkpoints a run started at `start` has taken by `now`: the largest
    j >= 1 with start + j*C <= now and j*C < need (0 when none, or no interval)."""
    if interval is None or interval <= 0 or not math.isfinite(now - start):
        return 0
    j = math.floor((now - start + SIM_EPS) / interval)
    if math.isfinite(need):
        # Strictly before the end: at the end the task finishes, it does not checkpoint.
        j = min(j, math.ceil((need - SIM_EPS) / interval) - 1)
    while j > 0 and start + j * interval > now + SIM_EPS:  # floor's own rounding
        j -= 1
    return max(0, j)


def sim_remaining(need: float, interval: float | None, checkpoints: int) -> float:
    """The work a restart resumes after `checkpoints` periodic checkpoints of a run of `need`."""
    return need - checkpoints * interval if interval and checkpoints else need


def sim_finished(now: float, exit_at: float) -> bool:
    return now >= exit_at - SIM_EPS


def read_sim_state(checkpoint_dir: Path | None) -> tuple[bool, float | None]:
    """(found, remaining) of `<checkpoint_dir>/sim-state.json`; remaining None means no end."""
    if checkpoint_dir is None:
        return False, None
    try:
        data = json.loads((checkpoint_dir / SIM_STATE_FILE).read_text())
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError) as exc:
        print(f"unreadable {SIM_STATE_FILE} ({exc}): starting from --duration", flush=True)
        return False, None
    remaining = data.get("remaining") if isinstance(data, dict) else None
    return True, None if remaining is None else float(remaining)


def _read_clock(path: Path) -> float | None:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None  # not written yet (no tick so far): time has not moved


class _SimFakeTask(_FakeTask):
    """The fake task on a simulated clock (module doc)."""

    def __init__(self, options: FakeTaskOptions, clock_file: Path) -> None:
        super().__init__(options)
        self.clock_file = clock_file
        self._clock_stamp: tuple[int, int, int] | None = None

    def _save(self, remaining: float) -> None:
        if self.options.checkpoint_dir is not None:
            value = remaining if math.isfinite(remaining) else None
            _write_atomic(self.options.checkpoint_dir / SIM_STATE_FILE, json.dumps({"remaining": value}))

    def _seen(self, now: float, exit_at: float) -> None:
        if self.options.clock_seen_file is not None:
            due = exit_at if math.isfinite(exit_at) else None
            _write_atomic(self.options.clock_seen_file, json.dumps({"seen": now, "exit_at": due}))

    def _clock_changed(self) -> bool:
        # A stat per poll; the file is replaced (new inode) on every write, so any change shows.
        try:
            st = os.stat(self.clock_file)
        except OSError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._clock_stamp:
            return False
        self._clock_stamp = stamp
        return True

    def _new_time(self) -> float | None:
        """The clock file's value if the file changed since the last look, else None."""
        return _read_clock(self.clock_file) if self._clock_changed() else None

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGUSR1, self.on_sigusr1)  # SIGUSR1's default would kill it
        if self.options.env_file is not None:
            _write_atomic(self.options.env_file, json.dumps(dict(os.environ), sort_keys=True))
        self._say(f"started pid={os.getpid()}")
        found, saved = read_sim_state(self.options.checkpoint_dir)
        remaining = saved if found else self.options.duration_s
        need = sim_need(remaining, self.options.restart_overhead_s)
        first = self._new_time()
        start = self.options.sim_start
        while start is None:  # no GFS_SIM_START: the clock file's value, once there is one
            start = first = first if first is not None else self._new_time()
            if start is None:
                if self.sigterm:
                    self._say("checkpointed")
                    return 0
                time.sleep(_SIM_POLL_S)
        now = start if first is None else first
        exit_at = start + need
        interval = self.options.checkpoint_s
        self._save(need)
        self._say(f"sim start={start!r} need={need!r} exit_at={exit_at!r}")
        done = 0
        handled: float | None = None
        while not self.sigterm:
            if now != handled:
                handled = now
                taken = sim_checkpoints(start, need, interval, now)
                if taken > done:  # only forward: a clock stepping back undoes no checkpoint
                    done = taken
                    self._save(sim_remaining(need, interval, done))
                    self.checkpoints += 1
                    self._say(f"checkpoint {done} remaining={sim_remaining(need, interval, done)!r}")
                if sim_finished(now, exit_at):
                    self._say(f"finished exit_code={self.options.exit_code}")
                    return self.options.exit_code
                self._seen(now, exit_at)
            if self.warned:
                self.warned = False
                self._say("warning noted")
            time.sleep(_SIM_POLL_S)
            self.steps += 1
            changed = self._new_time()
            if changed is not None:
                now = changed
        # Evicted: the state stays at the last periodic checkpoint (the work since is lost).
        self._say("checkpointed")
        return 0


def run_fake_task(options: FakeTaskOptions) -> int:
    """Work until done or asked to stop; returns the exit status."""
    if options.sim_clock_file is not None:
        return _SimFakeTask(options, options.sim_clock_file).run()
    return _FakeTask(options).run()


def _env_float(name: str) -> float | None:
    value = os.environ.get(name, "").strip()
    return float(value) if value else None


def options_from(
    *,
    duration_s: float | None,
    exit_code: int,
    ignore_sigterm: bool,
    checkpoint_s: float | None,
    checkpoint_dir: str | None,
    progress_file: str | None,
    env_file: str | None,
    sim_clock: str | None = None,
) -> FakeTaskOptions:
    """Fill what the flags leave open from the agent's environment (GFS_CHECKPOINT_INTERVAL_S,
    GFS_CHECKPOINT_DIR, GFS_RESTART_OVERHEAD_S, and in topic mode GFS_SIM_CLOCK_FILE,
    GFS_SIM_START, GFS_CLOCK_SEEN_FILE), so a BindCommand's settings reach the task."""
    directory = checkpoint_dir or os.environ.get("GFS_CHECKPOINT_DIR") or None
    clock_file = sim_clock or os.environ.get("GFS_SIM_CLOCK_FILE") or None
    seen_file = os.environ.get("GFS_CLOCK_SEEN_FILE") or None
    return FakeTaskOptions(
        duration_s=duration_s,
        exit_code=exit_code,
        ignore_sigterm=ignore_sigterm,
        checkpoint_s=checkpoint_s if checkpoint_s is not None else _env_float("GFS_CHECKPOINT_INTERVAL_S"),
        checkpoint_dir=Path(directory) if directory else None,
        progress_file=Path(progress_file) if progress_file else None,
        env_file=Path(env_file) if env_file else None,
        sim_clock_file=Path(clock_file) if clock_file else None,
        sim_start=_env_float("GFS_SIM_START"),
        clock_seen_file=Path(seen_file) if seen_file else None,
        restart_overhead_s=_env_float("GFS_RESTART_OVERHEAD_S") or 0.0,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake-task", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=None, help="exit after this many seconds")
    parser.add_argument("--exit-code", type=int, default=0, help="status when the duration ends")
    parser.add_argument("--ignore-sigterm", action="store_true", help="note SIGTERM and go on")
    parser.add_argument("--checkpoint-s", type=float, default=None, help="periodic checkpoint interval")
    parser.add_argument("--checkpoint-dir", default=None, help="where checkpoint.json goes")
    parser.add_argument("--progress-file", default=None, help="append progress lines here too")
    parser.add_argument("--env-file", default=None, help="write the environment (JSON) here at start")
    parser.add_argument(
        "--sim-clock", default=None, help="simulated clock: read the time from this file (GFS_SIM_CLOCK_FILE)"
    )
    args = parser.parse_args(argv)
    return run_fake_task(
        options_from(
            duration_s=args.duration,
            exit_code=args.exit_code,
            ignore_sigterm=args.ignore_sigterm,
            checkpoint_s=args.checkpoint_s,
            checkpoint_dir=args.checkpoint_dir,
            progress_file=args.progress_file,
            env_file=args.env_file,
            sim_clock=args.sim_clock,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
