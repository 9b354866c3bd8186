"""What the SRE API, the controls and the dashboard read from a decider: a narrow view.

They are handed the running `Decider` (decider/decider.py) but type against this Protocol, so none
of them imports the service or the decider: imports go one way, service -> api -> controls /
dashboard -> trace_view, and the read side cannot reach into the decider's write path by accident
(issue 23 item 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import asyncpg
from opentelemetry import context as otel_context
from pydantic import SecretStr

from gfs.services.platform.clock import Clock
from gfs.services.preemption.controller.pool import PoolController


class PartitionView(Protocol):
    @property
    def next_offset(self) -> int: ...


class AdminSettings(Protocol):
    @property
    def preemption_admin_token(self) -> SecretStr | None: ...


class DeciderView(Protocol):
    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def instance(self) -> str: ...
    @property
    def settings(self) -> AdminSettings: ...
    @property
    def partitions(self) -> Mapping[int, PartitionView]: ...
    @property
    def contexts(self) -> Mapping[str, otel_context.Context]: ...

    def owned_pools(self) -> dict[str, PoolController]: ...

    async def tick(self) -> None: ...
