"""The node agent's own metrics: commands handled and refused, and how fast an eviction's SIGTERM
goes out. One `AgentMetrics` is built in the composition root (agent.py) and handed to the two
collaborators that record into it: the command handler (commands.py) and the evictor
(eviction.py)."""

from __future__ import annotations

import collections
from dataclasses import dataclass

from opentelemetry.metrics import Counter, Histogram, Meter

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(slots=True)
class AgentMetrics:
    rejected: Counter
    commands: Counter
    sigterm_latency: Histogram
    sigterm_since_issued: Histogram
    # Plain counts, for logs and tests (the OTel instruments are write-only).
    rejections: collections.Counter[str]

    @classmethod
    def create(cls, meter: Meter) -> AgentMetrics:
        return cls(
            rejected=meter.create_counter(
                "gfs_agent_commands_rejected", description="Commands refused by the node agent, by reason."
            ),
            commands=meter.create_counter(
                "gfs_agent_commands", description="Commands handled by the node agent, by kind and result."
            ),
            sigterm_latency=meter.create_histogram(
                "gfs_agent_sigterm_latency_seconds",
                unit="s",
                description="Eviction command received -> SIGTERM sent to its workers.",
                explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS_S,
            ),
            sigterm_since_issued=meter.create_histogram(
                "gfs_agent_sigterm_since_issued_seconds",
                unit="s",
                description="Eviction command issued_at (scheduler clock) -> SIGTERM sent.",
                explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS_S,
            ),
            rejections=collections.Counter(),
        )
