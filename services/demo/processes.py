"""What is left of a `gfs demo live` run (services/demo/live.py) once its services are stopped: the
agents leave their workers running when stopped (a restarted agent re-adopts them), so the demo
finds and kills what is left by its `GFS_DEMO_RUN`. Starting and stopping the services themselves is
the tools' shared `gfs.services.toolkit.processes`."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from gfs.services.toolkit.processes import kill_agent_workers


def _kill_workers(workdir: Path, run: str) -> None:
    """The demo's workers must not outlive it. Those in the agents' journals, then any process still
    carrying this run's `GFS_DEMO_RUN` (a worker started after its agent's last journal write)."""
    kill_agent_workers(workdir.glob("*/journal.json"))
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
