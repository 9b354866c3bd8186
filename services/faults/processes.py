"""The processes a fault run supervises (services/faults/harness.py): each GFS service or agent a
`python -m services ...` in its own process group, killed with -9 and restarted by the fault loop,
restarted by the supervisor when it exits on its own; readiness probes; and the agents' workers
left behind, killed at the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from services.platform.settings import REPO_ROOT


@dataclass(slots=True)
class Supervised:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    kills: int = 0
    restarts: int = 0
    paused: bool = False  # the fault loop is killing and restarting it: the supervisor keeps off
    exits: int = 0  # exited on its own and restarted

    def start(self) -> None:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services", *self.args], cwd=REPO_ROOT, env=self.env,
            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        handle.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            # The agent's workers run in their own sessions: killing the agent's group leaves them.
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.kills += 1

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


async def _get(url: str) -> tuple[int, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, http.get(url) as r:
            text = await r.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0, None
    try:
        return r.status, json.loads(text)
    except ValueError:  # /metrics is text
        return r.status, None


async def _until_ready(
    ports: dict[str, int], nodes: list[str], pool: str, *, timeout: float, only: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = await _get(f"http://127.0.0.1:{ports['preemption']}/pools")
        ok = status == 200 and (
            not nodes or (pool in body["pools"] and body["pools"][pool]["nodes"] == len(nodes))
        )
        if only != "preemption":
            ok = ok and (await _get(f"http://127.0.0.1:{ports['quota']}/readyz"))[0] == 200
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
    for node in nodes:
        path = workdir / node / "journal.json"
        with contextlib.suppress(OSError, ValueError):
            for worker in json.loads(path.read_text()).get("workers", {}).values():
                pid = worker.get("pid")
                if pid and _alive(int(pid)):
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        if b"fake_task" in cmdline.read():
                            os.killpg(int(pid), signal.SIGKILL)
