"""Query-string and path parameters of the SRE API, validated: a bad one is a 422 with a message.

`int("-1")` parsed fine and reached Postgres as `LIMIT -1` (a 500, issue 22); a NUL in a task id of
a path did the same. Parameters are checked here, before any query, and refused with 422
Unprocessable Content and a JSON body naming the parameter, its value and what is accepted.
"""

from __future__ import annotations

import json
import re

from aiohttp import web

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def unprocessable(name: str, value: str, expected: str) -> web.HTTPUnprocessableEntity:
    body = {"error": f"invalid query parameter {name!r}: {value!r}; expected {expected}", "parameter": name}
    return web.HTTPUnprocessableEntity(text=json.dumps(body), content_type="application/json")


def int_param(request: web.Request, name: str, *, default: int, low: int, high: int) -> int:
    """The integer parameter `name` (default when absent); 422 unless it lies in [low, high]."""
    raw = request.query.get(name)
    if raw is None:
        return default
    expected = f"an integer from {low} to {high}"
    try:
        value = int(raw)
    except ValueError:
        raise unprocessable(name, raw, expected) from None
    if not low <= value <= high:
        raise unprocessable(name, raw, expected)
    return value


def id_param(request: web.Request, name: str) -> str:
    """The path parameter `name` as an identifier: 1..256 characters, no control character."""
    value = request.match_info[name]
    if not 1 <= len(value) <= 256 or _CONTROL.search(value):
        raise unprocessable(name, value, "1 to 256 characters without control characters")
    return value
