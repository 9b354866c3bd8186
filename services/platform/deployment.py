"""One deployment per broker (issue 38 item 5): every record a deployment publishes carries its id
in a Kafka header, and every consumer ignores records of another deployment.

Two GFS deployments on one broker (a parity run beside production, two test stacks, a staging
copy reading production's topics) share the topics and often the pool names; without an id a
quota service sized one deployment's pools from the other's forecasts, and a router took the other
deployment's tasks and quotas for its own. The id is `GFS_DEPLOYMENT` (empty: the default
deployment). Rules:

- a producer stamps `gfs-deployment: <id>` on each record unless the record already carries one (a
  router forwarding a record keeps the record's own), and stamps nothing under the default id, so
  a default deployment writes exactly what it wrote before ids existed;
- a consumer handles a record only when the record's id (no header: the default, "") is its own,
  before decoding it (another deployment's bad record is not ours to dead-letter); the others are
  skipped, counted, and their offsets committed like any record's.

Commands are also refused by the agents' signatures when two deployments use different secrets;
the id makes the separation hold when they share one (a copy of production's settings).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

HEADER = "gfs-deployment"
ENV = "GFS_DEPLOYMENT"
_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check(deployment: str) -> str:
    """`deployment` if it is a valid id ("" or 1-64 of `A-Z a-z 0-9 . _ -`, starting with a letter
    or digit), else ValueError naming the rule."""
    if deployment and not _PATTERN.match(deployment):
        raise ValueError(
            f"{ENV} {deployment!r}: 1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )
    return deployment


def current() -> str:
    """This process's deployment (`GFS_DEPLOYMENT`; "" when unset): the default of producers and
    consumers built without one (a service passes its settings' instead)."""
    return check(os.environ.get(ENV, "").strip())


def of(headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None) -> str:
    """The deployment a record belongs to ("": no header, the default deployment). `headers`: a
    record's (name, value) pairs, or a mapping (Faust gives either)."""
    if isinstance(headers, Mapping):
        value = headers.get(HEADER)
        return "" if value is None else value.decode("utf-8", "replace")
    for name, value in headers or ():
        if name == HEADER:
            return value.decode("utf-8", "replace")
    return ""


def stamped(headers: Sequence[tuple[str, bytes]], deployment: str) -> list[tuple[str, bytes]]:
    """`headers` with this deployment's id added (none for the default, none over a record's own)."""
    out = list(headers)
    if deployment and not any(name == HEADER for name, _ in out):
        out.append((HEADER, deployment.encode("utf-8")))
    return out


def foreign(headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None, deployment: str) -> bool:
    """Whether a record with `headers` belongs to another deployment than `deployment`."""
    return of(headers) != deployment
