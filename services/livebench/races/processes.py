"""The processes `gfs livebench races` starts (services/livebench/races/bench.py): the preemption service
and the node agents, each `python -m gfs.services ...` in its own process group (the tools' shared
`gfs.services.toolkit.processes`), their CPU time, and the readiness probes the run waits on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from gfs.services.toolkit.processes import ServiceProcess


@dataclass(slots=True)
class _Proc(ServiceProcess):
    """A process of the run (the tools' shared `ServiceProcess`) and the CPU time it used."""

    def cpu_s(self) -> float:
        if self.proc is None:
            return float("nan")
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        return float("nan")


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
