"""Getting the live side of a parity run ready (services/parity/driver.py): its fresh consumer groups
committed at the topics' end, so the shared topics' history never reaches them, and the waits for
the services to answer ready and for the agents to join."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.topics import topic as registry_topic
from services.faults.processes import _get


async def _start_groups_at_end(bootstrap: list[str], groups: Mapping[str, Sequence[str]]) -> None:
    """Commit the current end offsets for each fresh group: the run's services start reading
    there, so the shared topics' history (other runs, other tests) never reaches them."""
    for group, topics in groups.items():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            parts = [TopicPartition(t, p) for t in topics for p in range(registry_topic(t).partitions)]
            ends = await consumer.end_offsets(parts)
            consumer.assign(parts)
            await consumer.commit({tp: end for tp, end in ends.items()})
        finally:
            await consumer.stop()


async def _ready(api: str, ports: dict[str, int]) -> bool:
    ok = (await _get(f"{api}/readyz"))[0] == 200
    ok = ok and (await _get(f"http://127.0.0.1:{ports['quota']}/readyz"))[0] == 200
    return ok and (await _get(f"http://127.0.0.1:{ports['forecast']}/metrics"))[0] == 200


async def _joined(api: str, nodes: int) -> bool:
    status, body = await _get(f"{api}/pools")
    return status == 200 and sum(p["nodes"] for p in body["pools"].values()) >= nodes


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(what)
