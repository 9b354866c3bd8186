"""Self-fencing: a node cut off from the broker freezes its workers before the scheduler can run
their tasks anywhere else (issue 38 item 1; docs/attempts.md, "No two runs at once").

The preemption service declares a silent node lost, and runs its tasks elsewhere, no earlier than
`PREEMPTION_NODE_TIMEOUT_S - PREEMPTION_MAX_CLOCK_SKEW_S` (20 s at the defaults) after the sample
time of the newest heartbeat of the node it read (liveness.py clamps a heartbeat's time to at most
the skew before it was forwarded). So the agent counts from the sample time of its newest heartbeat
the broker acknowledged:

- **Freeze** after `after_s` (AGENT_FENCE_AFTER_S, 15 s) with no acknowledged heartbeat: SIGSTOP to
  every live worker's process group. Instant and uncatchable, so no grace to wait out; nothing is
  lost yet (the processes and their GPU memory stay), they only stop running.
- **Contact back** (a heartbeat acknowledged): if it was acknowledged less than `thaw_within_s`
  (AGENT_FENCE_THAW_WITHIN_S, 20 s) after the newest heartbeat acknowledged before it, the service
  had not read a silence long enough to declare the node lost when it read that heartbeat, so
  the workers continue (SIGCONT): a short cut costs a pause, not the work. Otherwise the service may
  have run the tasks elsewhere: the frozen workers are killed (SIGKILL) and their exits reported
  `evicted` with a `fenced:` detail; their attempts are revoked (a late bind of one never starts).
  The service requeues such a run if it still held it (controller/pool.py, `node_fenced`).

What it costs: a broker outage longer than `thaw_within_s` stops every run of every node (they are
requeued from their checkpoints), where without the fence they would have continued and a node
declared lost during a partition would have run its old attempts for up to
PREEMPTION_UNKNOWN_WORK_AFTER_S beside the new ones. AGENT_FENCE_AFTER_S=0 turns it off.

Not covered: an agent that is itself stopped (SIGSTOP, a hung host) cannot freeze its workers, and
an agent restarted during a cut counts from its start (the acknowledgement time is not kept across
restarts); a worker found frozen at start is killed (recovery.py), as its cut outlived the agent.

`Fence` owns the contact state (the newest acknowledged sample, the ack of the one before); the
workers' frozen marks are the journal's (`WorkerEntry.frozen_at`, `fenced`), so a restart sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from gfs.services.node_agent import procs
from gfs.services.node_agent.journal import Journal, WorkerEntry

# Every part of the agent logs under the one logger name it always had (see eviction.py).
log = logging.getLogger("gfs.services.node_agent.agent")

FENCED_DETAIL = (
    "fenced: no heartbeat reached the broker for {silence:.1f} s (AGENT_FENCE_THAW_WITHIN_S={thaw:g})"
)


class Fence:
    """Freezes the workers when the node's heartbeats stop reaching the broker, and thaws or
    kills them when one reaches it again (module doc). `after_s` 0: off."""

    def __init__(
        self,
        *,
        after_s: float,
        thaw_within_s: float,
        journal: Journal,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if after_s > 0 and thaw_within_s <= after_s:
            raise ValueError(
                f"the fence's thaw window ({thaw_within_s:g} s) must exceed its delay ({after_s:g} s)"
            )
        self.after_s = after_s
        self.thaw_within_s = thaw_within_s
        self.journal = journal
        self.clock = clock
        self.monotonic = monotonic
        # The agent's start counts as contact: it has not been cut off for longer than it ran.
        self._contact = monotonic()  # sample time of the newest heartbeat the broker acknowledged
        self.frozen = 0  # workers frozen, thawed and killed so far (logs, tests)
        self.thawed = 0
        self.killed = 0

    @property
    def enabled(self) -> bool:
        return self.after_s > 0

    def silence(self) -> float:
        """Seconds since the newest acknowledged heartbeat was sampled."""
        return self.monotonic() - self._contact

    def check(self) -> list[WorkerEntry]:
        """Freeze every live worker not frozen yet when the silence reached `after_s`; returns
        those frozen now (also a worker started during the cut: a bind read is no heartbeat)."""
        if not self.enabled or self.silence() < self.after_s:
            return []
        frozen = []
        for worker in self.journal.live_workers():
            if worker.frozen_at is not None or worker.pid is None or worker.start_ticks is None:
                continue
            if procs.signal_group(worker.pid, worker.start_ticks, signal.SIGSTOP) is procs.SignalResult.SENT:
                worker.frozen_at = self.clock()
                frozen.append(worker)
        if frozen:
            self.frozen += len(frozen)
            self.journal.save()  # a restart must know they are frozen (recovery kills them)
            log.warning(
                "fence: no heartbeat acknowledged for %.1f s: %d worker(s) frozen (%s)",
                self.silence(), len(frozen), ", ".join(w.key for w in frozen),
            )  # fmt: skip
        return frozen

    def acknowledged(self, sampled: float) -> None:
        """A heartbeat sampled at `sampled` (this clock) reached the broker: contact. Frozen
        workers are thawed if the cut was short enough, else killed (module doc)."""
        silence = self.monotonic() - self._contact
        self._contact = max(self._contact, sampled)
        frozen = [w for w in self.journal.live_workers() if w.frozen_at is not None]
        if not frozen:
            return
        if silence < self.thaw_within_s:
            for worker in frozen:
                assert worker.pid is not None and worker.start_ticks is not None
                procs.signal_group(worker.pid, worker.start_ticks, signal.SIGCONT)
                worker.frozen_at = None
            self.thawed += len(frozen)
            log.warning("fence: contact after %.1f s: %d worker(s) continue", silence, len(frozen))
        else:
            self.kill(frozen, FENCED_DETAIL.format(silence=silence, thaw=self.thaw_within_s))
            log.warning(
                "fence: contact after %.1f s (over %g s: the service may have run them elsewhere): "
                "%d worker(s) killed", silence, self.thaw_within_s, len(frozen),
            )  # fmt: skip
        self.journal.save()

    def kill(self, workers: list[WorkerEntry], detail: str) -> None:
        """Kill frozen workers for good: reported `evicted` (publisher.exited), their attempts
        revoked so a late bind of one never starts again here (under a fence id of its own)."""
        now = self.clock()
        fence_id = uuid.uuid4()
        for worker in workers:
            assert worker.pid is not None and worker.start_ticks is not None
            procs.signal_group(worker.pid, worker.start_ticks, signal.SIGKILL)
            worker.fenced = True
            worker.exit_detail = detail
            if worker.attempt is not None:
                revoked = self.journal.state.revoked.setdefault(worker.task_id, {})
                revoked.setdefault(worker.attempt, (fence_id, now))
        self.killed += len(workers)

    async def watch(self, stop: asyncio.Event, every_s: float = 0.25) -> None:
        """Check every `every_s` until `stop`."""
        if not self.enabled:
            await stop.wait()
            return
        while not stop.is_set():
            self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
