"""One decode per record (issue 23, item 2): an input the router of the deciding instance validated
reaches its decider as the validated envelope, not as bytes to decode and validate again; decisions
are the same (a spot task is bound, its worker's ack applied)."""

from __future__ import annotations

from typing import Any

import pytest
from preemption_world import Cluster, _service, _settings

from gfs.services.preemption.decider import reading

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_the_decider_takes_what_its_router_validated_instead_of_decoding_it_again(
    world: tuple[Cluster, str], kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, dsn = world
    decoded: list[str] = []  # source topics of the inbox records the decider decoded itself
    real = reading.decode

    def counting(topic: str, value: bytes) -> Any:
        decoded.append(topic)
        return real(topic, value)

    monkeypatch.setattr(reading, "decode", counting)
    async with _service(_settings(dsn, kafka_bootstrap, c.pool)) as (decider, _):
        await c.up(decider, 2)
        await c.spot_running("A")
        # The worker's ack, the last of the five inbox records (telemetry x2, the quota, the
        # submission, the ack), was applied: the decider has read them all. Each was decoded once,
        # by the router; one may race its own ack (the decider read it before the router heard
        # where it landed): that one is decoded from its bytes, as before.
        assert len(decoded) <= 1, decoded
        handoff = decider.handoff
        assert handoff is not None and handoff.handed >= 4 and handoff.missed == len(decoded)
