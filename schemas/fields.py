"""Field types shared by every wire contract: identifiers and UTC timestamps.

Identifiers are constrained strings (non-empty, bounded, no surrounding whitespace) rather than
bare `str`, so an empty or padded id is rejected at the edge instead of becoming a second,
invisible key in Kafka or Postgres. They are `Annotated` aliases, not `NewType`s, because pydantic
turns the annotation into validation and JSON Schema; `services.core` keeps its own NewTypes and
the service-side mapping translates between the two.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, StringConstraints

# Identifier shape: 1..256 visible characters. 256 leaves room for the trace's long job names
# while staying far below Kafka's key size limits.
_Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=256, strip_whitespace=False, pattern=r"^\S(.*\S)?$")
]

TaskId = _Identifier
"""A task (job) id, unique cluster-wide; the Kafka key of the task topics."""
TenantId = _Identifier
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
