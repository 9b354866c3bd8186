"""Reclaim warnings (issue 27 item 2): a signed WarnCommand makes the agent send SIGUSR1 to the
warned run's workers on this node, so they checkpoint before a likely eviction.

`ReclaimWarner` owns no state of its own: it is given the journal (whose worker table it reads and
where it records each warning) and the agent's clock. Nothing is stopped and nothing is
acknowledged: the scheduler does not wait on a warning, and its TaskReclaimWarning event already
tells the user. The command is journaled (kind "warn", the workers signalled in `targets`), each
worker's `warned_at` and `warnings` count too, so a redelivered command is recognised by its id and
never signals twice.

SIGUSR1's default action terminates a process, so a worker is signalled only when the leader of
its process group handles or ignores SIGUSR1 (/proc/PID/status `SigCgt`/`SigIgn`); one that never
installed a handler is left alone and the skip is logged and journaled (docs/operations.md,
"Reclaim warnings").
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from datetime import datetime

from gfs.schemas.commands import WarnCommand
from gfs.services.node_agent import procs
from gfs.services.node_agent.journal import CommandEntry, Journal

# The agent's one logger name (see workers.py).
log = logging.getLogger("gfs.services.node_agent.agent")

WARN_SIGNAL = signal.SIGUSR1


class ReclaimWarner:
    """Signals the warned run's workers (module doc)."""

    def __init__(self, *, journal: Journal, clock: Callable[[], datetime]) -> None:
        self.journal = journal
        self.clock = clock

    async def warn(self, command: WarnCommand, headers: list[tuple[str, str]], received_at: datetime) -> None:
        targets = [
            w
            for w in self.journal.live_workers(command.task_id)
            if w.pid is not None and w.attempt in (None, command.warned_attempt)
        ]
        entry = CommandEntry(
            command_id=command.command_id, kind="warn", issued_at=command.issued_at,
            received_at=received_at, trace_headers=headers, task_ids=(command.task_id,),
            attempt=command.warned_attempt, state="done",
        )  # fmt: skip
        self.journal.state.commands[str(command.command_id)] = entry
        for worker in targets:
            if worker.start_ticks is None:
                continue
            if not procs.catches(worker.pid or 0, WARN_SIGNAL):
                entry.failures.append(f"pid {worker.pid} does not handle SIGUSR1: not signalled")
                log.info("warn task=%s worker=%d pid=%s: no SIGUSR1 handler, not signalled",
                         worker.task_id, worker.worker_index, worker.pid)  # fmt: skip
                continue
            result = procs.signal_group(worker.pid or 0, worker.start_ticks, WARN_SIGNAL)
            if result is not procs.SignalResult.SENT:
                entry.failures.append(f"SIGUSR1 to pid {worker.pid}: {result}")
                continue
            worker.warned_at = self.clock()
            worker.warnings += 1
            entry.targets.append(worker.key)
            log.info("SIGUSR1 task=%s worker=%d pid=%d (reclaim warning, lead %.0fs)",
                     worker.task_id, worker.worker_index, worker.pid, command.lead_seconds)  # fmt: skip
        self.journal.mark()
