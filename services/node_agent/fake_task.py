"""`gfs fake-task`: a GPU-free worker for demos and tests (also `python -m services.node_agent.fake_task`).

It "works" in small sleeps, writes progress, checkpoints every `--checkpoint-s` seconds and on
SIGTERM (then prints `checkpointed` and exits 0), and exits by itself after `--duration` seconds
with `--exit-code`. `--ignore-sigterm` makes it note the SIGTERM and go on working, so the agent's
grace period runs out and it has to SIGKILL.

Only the standard library is imported: an agent may start hundreds of these at once (the
benchmark does), so start-up must cost a bare interpreter and nothing more.
"""

from __future__ import annotations

import argparse
import json
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


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeTaskOptions:
    duration_s: float | None = None  # None: work until stopped
    exit_code: int = 0
    ignore_sigterm: bool = False
    checkpoint_s: float | None = None
    checkpoint_dir: Path | None = None
    progress_file: Path | None = None
    env_file: Path | None = None


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

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
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
            if period is not None and now - last_checkpoint >= period:
                self.checkpoint()
                last_checkpoint = now
            time.sleep(_STEP_S)
            self.steps += 1
        self.checkpoint()
        self._say("checkpointed")
        return 0


def run_fake_task(options: FakeTaskOptions) -> int:
    """Work until done or asked to stop; returns the exit status."""
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
) -> FakeTaskOptions:
    """Fill what the flags leave open from the agent's environment (GFS_CHECKPOINT_INTERVAL_S,
    GFS_CHECKPOINT_DIR), so a BindCommand's `checkpoint_interval_s` reaches the task."""
    directory = checkpoint_dir or os.environ.get("GFS_CHECKPOINT_DIR") or None
    return FakeTaskOptions(
        duration_s=duration_s,
        exit_code=exit_code,
        ignore_sigterm=ignore_sigterm,
        checkpoint_s=checkpoint_s if checkpoint_s is not None else _env_float("GFS_CHECKPOINT_INTERVAL_S"),
        checkpoint_dir=Path(directory) if directory else None,
        progress_file=Path(progress_file) if progress_file else None,
        env_file=Path(env_file) if env_file else None,
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
        )
    )


if __name__ == "__main__":
    sys.exit(main())
