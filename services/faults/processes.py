"""The processes a fault run supervises (services/faults/harness.py): each GFS service or agent a
`python -m gfs.services ...` in its own process group (the tools' shared `gfs.services.toolkit.processes`),
killed with -9 and restarted by the fault loop, restarted by the supervisor when it exits on its
own; readiness probes; and the agents' workers left behind, killed at the end."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gfs.services.platform.settings import REPO_ROOT
from gfs.services.toolkit.probes import get_json
from gfs.services.toolkit.processes import ServiceProcess, kill_agent_workers


@dataclass(slots=True)
class Supervised(ServiceProcess):
    """A service the fault loop kills with -9 and restarts, and the supervisor restarts when it
    exits on its own; the counts go into the run's report."""

    kills: int = 0
    restarts: int = 0
    paused: bool = False  # the fault loop is killing and restarting it: the supervisor keeps off
    exits: int = 0  # exited on its own and restarted

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            # The agent's workers run in their own sessions: killing the agent's group leaves them.
            self.kill()
            self.proc.wait(timeout=10)
            self.kills += 1


def _script(name: str) -> None:
    subprocess.run(["bash", str(REPO_ROOT / "infra" / name)], check=False, capture_output=True, timeout=180)


async def _supervise(services: list[Supervised], stop: asyncio.Event) -> None:
    """Restart any service that exited on its own (it gave up on the broker or the database)."""
    while True:
        for s in services:
            if s.proc is not None and not s.paused and not s.alive():
                s.exits += 1
                await asyncio.sleep(1.0)
                s.start()
        await asyncio.sleep(1.0)


async def _until_ready(
    ports: dict[str, int], nodes: list[str], pool: str, *, timeout: float, only: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = await get_json(f"http://127.0.0.1:{ports['preemption']}/pools")
        ok = status == 200 and (
            not nodes or (pool in body["pools"] and body["pools"][pool]["nodes"] == len(nodes))
        )
        if only != "preemption":
            ok = ok and (await get_json(f"http://127.0.0.1:{ports['quota']}/readyz"))[0] == 200
        if ok:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the services did not become ready")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_workers(workdir: Path, nodes: list[str]) -> None:
    kill_agent_workers(workdir / node / "journal.json" for node in nodes)
