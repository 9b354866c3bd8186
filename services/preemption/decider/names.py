"""The names the decider is known by outside the process, in one place for all its parts: the
producer on its envelopes and dead letters, its tracer (and meter), and its logger."""

from __future__ import annotations

PRODUCER = "gfs-preemption"

TRACER = "gfs.preemption"

# Every part of the decider logs under the one logger name it always had (service.py's), so a
# deployment's log filters see the same records whichever module emits them.
LOGGER = "gfs.services.preemption.service"
