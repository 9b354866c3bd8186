"""The processes `gfs demo live` starts (services/demo/live.py): one `python -m services ...` per
service or agent in its own process group, stopped together; and, since the agents leave their
workers running when stopped, finding and killing what is left of a run by its `GFS_DEMO_RUN`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from services.platform.settings import REPO_ROOT


@dataclass(slots=True)
class Proc:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services", *self.args],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def wait(self, deadline: float) -> None:
        """Wait for the process until `deadline` (monotonic), then kill its group."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def stop_all(procs: list[Proc], timeout_s: float = 15.0) -> None:
    """SIGTERM every process group at once, then wait; a group still there after `timeout_s` is
    killed."""
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.wait(deadline)


def _kill_workers(workdir: Path, run: str) -> None:
    """The agents leave their workers running when stopped (a restarted agent re-adopts them): the
    demo's workers must not outlive it. Those in the agents' journals, then any process still
    carrying this run's `GFS_DEMO_RUN` (a worker started after its agent's last journal write)."""
    for journal in workdir.glob("*/journal.json"):
        with contextlib.suppress(OSError, ValueError):
            for worker in json.loads(journal.read_text()).get("workers", {}).values():
                pid = worker.get("pid")
                if not pid:
                    continue
                command = b""
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    command = cmdline.read()
                if b"fake_task" in command or b"fake-task" in command:
                    with contextlib.suppress(OSError):
                        os.killpg(int(pid), signal.SIGKILL)
    for pid in run_processes(run):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def run_processes(run: str) -> list[int]:
    """Processes (other than this one) whose environment has `GFS_DEMO_RUN=<run>`: every process
    the demo run started and their children."""
    marker = f"GFS_DEMO_RUN={run}".encode()
    found: list[int] = []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
