"""What the decider counts: `Stats`, plain counters since the process started (read by the tests,
the benchmarks and the metrics' callbacks), and `Instruments`, the OpenTelemetry instruments it
writes to.

Both are records, not objects with behaviour: the composition root (decider.py) makes one of each
and hands it to every part that counts, so each counter is written by the one part that knows the
event (the comments say which)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Stats:
    batches: int = 0  # committed batches and ticks (transaction)
    inputs: int = 0  # inbox records decided (inbox)
    duplicates: int = 0  # inbox records already journaled, skipped (inbox)
    decisions: int = 0  # (transaction)
    commands: int = 0  # (transaction)
    events: int = 0  # (transaction)
    fenced: int = 0  # partitions lost to a newer claim (partition.OwnedPartitions)
    node_loss_held: int = 0  # episodes of silent nodes not declared lost (hearing; liveness.py)
    rebuilt: int = 0  # partitions dropped after a failed commit (transaction)
    dead_lettered: int = 0  # (dead_letters)
    poisoned: int = 0  # inbox records dead-lettered because they failed to store twice (inbox)
    refused_acks: int = 0  # acks (and telemetry) refused: unmatched (controller.refusal) or unsigned
    unauthenticated: int = 0  # of those, refused for their signature (report_auth.py)
    unsigned_accepted: int = 0  # unsigned acks and telemetry applied (require_signed_acks off)
    latencies: list[float] = field(default_factory=list)  # inbox record -> committed, seconds (recent)


@dataclass(slots=True)
class Instruments:
    """The instruments the decider writes to; None until `metrics.register_metrics` sets them (a
    decider built without metrics, as in the tests and benchmarks, counts in `Stats` only)."""

    latency_hist: Any = None  # inbox batch read -> committed (inbox)
    decisions_counter: Any = None  # decision records by kind (transaction)
    held_counter: Any = None  # node-loss holds by reason and pool (hearing)
    refused_counter: Any = None  # refused acks and telemetry by type and reason (dead_letters)
    unsigned_counter: Any = None  # unsigned reports applied, by type (reading)
