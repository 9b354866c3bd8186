"""Field types shared by every wire contract: identifiers and UTC timestamps.

Identifiers are constrained strings (non-empty, bounded, no surrounding whitespace) rather than
bare `str`, so an empty or padded id is rejected at the edge instead of becoming a second,
invisible key in Kafka or Postgres. They are `Annotated` aliases, not `NewType`s, because pydantic
turns the annotation into validation and JSON Schema; `gfs.services.core` keeps its own NewTypes and
the service-side mapping translates between the two.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, StringConstraints

# Control characters: C0 (U+0000-U+001F), DEL and C1 (U+007F-U+009F). NUL is refused by Postgres
# (text and jsonb), so one such record used to stop a partition (issue 22); the others corrupt logs,
# terminals and file names. Kept as a regex class so the exported JSON Schemas carry the rule too.
_CONTROL = r"\x00-\x1f\x7f-\x9f"
# Free text may span lines (an error's detail, a shell script), so TAB, LF and CR stay allowed.
_TEXT_CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"

_CONTROL_RE = re.compile(f"[{_CONTROL}]")
_TEXT_CONTROL_RE = re.compile(f"[{_TEXT_CONTROL}]")


def _refuse(found: re.Match[str] | None) -> None:
    if found is not None:
        raise ValueError(
            f"contains the control character U+{ord(found.group()):04X} at index {found.start()} "
            "(control characters are refused: NUL cannot be stored, the others corrupt logs and files)"
        )


def _no_control(value: object) -> object:
    # Runs before the pattern so the dead letter says which character and where, not just which
    # regular expression failed; the pattern stays for the exported JSON Schema.
    if isinstance(value, str):
        _refuse(_CONTROL_RE.search(value))
    return value


def _no_text_control(value: object) -> object:
    if isinstance(value, str):
        _refuse(_TEXT_CONTROL_RE.search(value))
    return value


def scrub_text(value: str) -> str:
    """`value` fit for a `FreeText` field: each refused control character becomes a visible
    `\\xNN` escape. For text a service echoes from elsewhere (an OS error, a process's output), so
    building its own message never fails on the rule above."""
    return _TEXT_CONTROL_RE.sub(lambda found: f"\\x{ord(found.group()):02x}", value)


def no_control_in_command(value: object) -> object:
    """A command's control-character check, run before its str-or-argv union is validated (so the
    error names the argv item instead of both union members)."""
    if isinstance(value, str):
        _refuse(_TEXT_CONTROL_RE.search(value))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if isinstance(item, str) and (found := _TEXT_CONTROL_RE.search(item)) is not None:
                raise ValueError(
                    f"argv item {index} contains the control character U+{ord(found.group()):04X} at "
                    f"index {found.start()} (control characters other than TAB, LF and CR are refused)"
                )
    return value


# Identifier shape: 1..256 visible characters, no control character anywhere, no surrounding
# whitespace. 256 leaves room for the trace's long job names while staying far below Kafka's key
# size limits.
_IDENTIFIER_PATTERN = rf"^[^\s{_CONTROL}](?:[^{_CONTROL}]*[^\s{_CONTROL}])?$"
_Identifier = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256, strip_whitespace=False, pattern=_IDENTIFIER_PATTERN),
    BeforeValidator(_no_control),
]

FREE_TEXT_PATTERN = rf"^[^{_TEXT_CONTROL}]*$"
"""Free text (messages, reasons, details, commands): any characters but NUL and the control
characters other than TAB, LF and CR."""

FreeText = Annotated[str, StringConstraints(pattern=FREE_TEXT_PATTERN), BeforeValidator(_no_text_control)]
"""A free string of the wire contracts: see `FREE_TEXT_PATTERN` (bounds are set per field)."""

CommandText = Annotated[str, StringConstraints(pattern=FREE_TEXT_PATTERN)]
"""One shell command or argv item (checked by `no_control_in_command` on the field, for the message;
the pattern is for the exported JSON Schema)."""

WorkerRef = Annotated[
    str,
    StringConstraints(min_length=1, max_length=300, pattern=_IDENTIFIER_PATTERN),
    BeforeValidator(_no_control),
]
"""`<task id>/<worker index>`: a task id's rules, room for the suffix."""

ShortName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=_IDENTIFIER_PATTERN),
    BeforeValidator(_no_control),
]
"""A short machine name that is not an id of the domain (a producer, a model version, a clock)."""

TaskId = _Identifier
"""A task (job) id, unique cluster-wide; the Kafka key of the task topics."""
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$"
"""Tenants: 1..128 characters, letters, digits and `._:@+-`, starting with a letter or digit (the
trace's organizations are numbers; names such as `org-a` or `team.ml@corp` fit). A tenant becomes
a label of metrics and forecasts and a key of the quota's books, so it is held to a name's shape."""

TenantId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=TENANT_PATTERN),
    BeforeValidator(_no_control),
]
"""The organization a task is billed to (the trace's `organization`)."""
NodeName = _Identifier
"""A GPU node's name (its hostname); the Kafka key of telemetry and node commands."""
GpuModel = _Identifier
"""A GPU model name such as `A100-SXM4-80GB`."""
PoolName = _Identifier
"""A GPU pool (the spec's virtual cluster): one per GPU model, so a pool name is a GPU model name."""


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]
"""A timezone-aware instant, normalised to UTC.

Naive datetimes are rejected ("Input should have timezone info"): a producer on a host with a
non-UTC local clock would otherwise shift every timestamp silently. Normalising to UTC makes two
equal instants compare and serialise equal whatever offset the producer used.
"""

GuaranteeHours = Literal[1, 2, 4]
"""The guaranteed durations a spot task may ask for (spec §4.2: 1 h by default; the quota is
computed per offered duration, and the forecast horizon is 4 h, so longer guarantees cannot be
provisioned)."""
