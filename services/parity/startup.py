"""Getting the live side of a parity run ready (services/parity/driver.py): the waits for the
services to answer ready and for the agents to join. (Its fresh consumer groups are committed at
the topics' end first, with the tools' shared `gfs.services.toolkit.consumer_groups`.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gfs.services.toolkit.probes import get_json


async def _ready(api: str, ports: dict[str, int]) -> bool:
    ok = (await get_json(f"{api}/readyz"))[0] == 200
    ok = ok and (await get_json(f"http://127.0.0.1:{ports['quota']}/readyz"))[0] == 200
    return ok and (await get_json(f"http://127.0.0.1:{ports['forecast']}/metrics"))[0] == 200


async def _joined(api: str, nodes: int) -> bool:
    status, body = await get_json(f"{api}/pools")
    return status == 200 and sum(p["nodes"] for p in body["pools"].values()) >= nodes


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(what)
