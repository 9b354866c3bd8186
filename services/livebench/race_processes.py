"""The processes `gfs livebench races` starts (services/livebench/races.py): the preemption service
and the node agents, each `python -m services ...` in its own process group, their CPU time, and
the readiness probes the run waits on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from services.platform.settings import REPO_ROOT


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        handle = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services", *args], cwd=REPO_ROOT, env=env, stdout=handle,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        handle.close()
        self.log = log

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_s(self) -> float:
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        return float("nan")

    def stop(self) -> None:
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


async def _get(url: str) -> tuple[int, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http, http.get(url) as r:
            return r.status, await r.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return 0, None


async def _until(what: str, probe: Any, timeout: float, procs: list[_Proc]) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        dead = [p.log for p in procs if not p.alive()]
        if dead:
            raise RuntimeError(f"a process exited while waiting for {what}; see {dead[0]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)
