"""Waiting for N preemption instances to share their work, for the benchmarks that run several
(`gfs livebench scale`, `gfs bench pipeline --instances`).

Scale-out is Kafka's: every instance runs a router and a decider, one consumer group per role, and
the inbox's partitions are spread over the instances by the group. Nothing of a run may be sent
before both groups are stable with every instance in them: a router whose group rebalances under
traffic can die on its pipelined offset commit (docs/operations.md, "Scaling out").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def until_split(ports: list[int], partitions: int, timeout: float = 180.0) -> list[list[int]]:
    """Every instance ready, the inbox's partitions split over all of them (/readyz); returns the
    partitions each instance owns."""
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while time.monotonic() < deadline:
            owned: list[list[int]] = []
            for port in ports:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                        owned.append((await response.json())["partitions"] if response.status == 200 else [])
                except (aiohttp.ClientError, OSError, TimeoutError, KeyError, ValueError):
                    owned.append([])
            if all(owned) and sorted(p for o in owned for p in o) == list(range(partitions)):
                return owned
            await asyncio.sleep(0.5)
    raise TimeoutError("the instances did not split the inbox's partitions between them")


async def until_stable(
    servers: str | list[str], groups: list[str], members: int, timeout: float = 120.0
) -> None:
    """Each consumer group Stable with `members` members, twice in a row 2 s apart."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        deadline, streak = time.monotonic() + timeout, 0
        while time.monotonic() < deadline and streak < 2:
            described = [(await admin.describe_consumer_groups([g]))[0].to_object() for g in groups]
            stable = all(
                g["state"] == "Stable" and len(g["members"]) == members
                for d in described
                for g in d["groups"]
            )
            streak = streak + 1 if stable else 0
            await asyncio.sleep(2.0)
    finally:
        await admin.close()


async def until_pools(
    ports: list[int], ready: Callable[[list[dict[str, Any]]], bool], what: str, timeout: float = 300.0
) -> list[dict[str, Any]]:
    """Poll every instance's `/pools` until `ready` holds for their pools (one dict per instance,
    {} for one that does not answer); returns them. `what` names the wait in the timeout's error."""
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while time.monotonic() < deadline:
            owned: list[dict[str, Any]] = []
            for port in ports:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/pools") as response:
                        owned.append((await response.json())["pools"])
                except (aiohttp.ClientError, OSError, TimeoutError, KeyError, ValueError):
                    owned.append({})
            if ready(owned):
                return owned
            await asyncio.sleep(0.5)
    raise TimeoutError(f"the preemption instances did not {what} in time")
