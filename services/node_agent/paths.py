"""File names built from ids a command carries: one safe path component each.

Task ids (and node names) are any visible characters (schemas/fields.py), so `../x` or `a/b` is a
valid task id; joined as it is, a worker's log or checkpoint folder could land outside the agent's
state directory (issue 22). Every path the agent builds from an id goes through `path_part`.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

MAX_PART_BYTES = 200
"""Longest component `path_part` returns: below the 255-byte name limit of Linux file systems,
with room for the suffixes the agent appends (`.<worker>.<command id>.log` is 43 more)."""


def path_part(name: str) -> str:
    """`name` as one safe path component: "/", "%" and other special characters are %-escaped,
    "." and ".." cannot occur, and a name whose escaped form is too long keeps its first part and
    a SHA-256 digest of the whole. Deterministic, so agents sharing a checkpoint root agree on a
    task's folder; a plain id (letters, digits, `-_.@+=,:`) is its own path component."""
    safe = quote(name, safe="-_.@+=,:")
    if safe in (".", ".."):
        return safe.replace(".", "%2E")
    if len(safe) > MAX_PART_BYTES:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{safe[: MAX_PART_BYTES - 34].rstrip('%0123456789ABCDEF')}~{digest}"
    return safe
