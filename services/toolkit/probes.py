"""HTTP probes of the live services' APIs (readiness, /pools, /explain, /metrics) a tool waits on."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def get_json(url: str, timeout_s: float = 3.0) -> tuple[int, Any]:
    """(status, decoded JSON body) of a GET; (0, None) when nothing answered in `timeout_s`, and
    (status, None) for a body that is not JSON (/metrics is text)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
            http.get(url) as r,
        ):
            text = await r.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0, None
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, None
