"""Expiry of the router's task routes (issue 25: `preemption_task_route` kept a row per task ever
submitted, about 17 million a day at 200 submissions/s).

A route is what lets a cancel (keyed by task, naming no pool) reach its task's pool, and what marks
a second submission of a task id as a duplicate. A task may run longer than any fixed window, so a
route is never expired by age alone:
- the decider marks a task's route ended when the task ends (`ended_tasks` of a committed batch's
  lifecycle events: finished, withdrawn, evicted without requeue, rejected other than as a
  duplicate; `mark_ended`);
- the router deletes routes ended `keep_s` ago or longer (`RouteExpiry.maybe_prune`, every
  `every_s`, at most `batch` rows a statement and `max_batches` statements a round, so a backlog
  never holds a long lock or stalls the routing loop).

`keep_s` (default a day, `preemption_route_keep_s`) is the redelivery window the routes protect:
a cancel arriving up to `keep_s` after its task ended still reaches the pool (which answers it as
it answers a cancel of an ended task), and a resubmission of the id is still marked duplicate. It
is longer than the pools' own memory of ended ids (seen_tasks.py, an hour), so a redelivered
submission is refused by one or the other. After it, a cancel for the task is dead-lettered by the
router with a reason that says the route may have expired; a resubmission is a new task.

If marking fails after the batch committed (Postgres away), the routes of that batch's ended tasks
stay unmarked and are kept: a bounded leak, logged, never a route lost while its task lives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import asyncpg
from pydantic import BaseModel

from gfs.schemas.tasks import RejectionReason, TaskEvicted, TaskFinished, TaskRejected, TaskWithdrawn

log = logging.getLogger(__name__)

DEFAULT_KEEP_S = 86_400.0
DEFAULT_EVERY_S = 60.0
DEFAULT_BATCH = 1_000
DEFAULT_MAX_BATCHES = 20


def ended_tasks(events: Iterable[BaseModel]) -> list[str]:
    """The task ids whose task ended with one of `events` (lifecycle events of a pool), in order."""
    return [tid for tid in map(_task_it_ends, events) if tid is not None]


def _task_it_ends(event: BaseModel) -> str | None:
    if isinstance(event, TaskEvicted):
        return None if event.requeued else event.task_id
    if isinstance(event, TaskRejected):
        # A duplicate's rejection is about a second submission: the first one's task lives on.
        return None if event.reason is RejectionReason.DUPLICATE_TASK_ID else event.task_id
    if isinstance(event, TaskFinished | TaskWithdrawn):
        return event.task_id
    return None


async def mark_ended(connection: asyncpg.Connection, task_ids: list[str]) -> int:
    """Mark the routes of `task_ids` ended now (the first end only counts); how many were marked."""
    if not task_ids:
        return 0
    status = await connection.execute(
        """UPDATE preemption_task_route SET ended_at = now()
           WHERE task_id = ANY($1::text[]) AND ended_at IS NULL""",
        task_ids,
    )
    return int(status.split()[-1])


async def prune(connection: asyncpg.Connection, *, keep_s: float, batch: int = DEFAULT_BATCH) -> int:
    """Delete at most `batch` routes ended `keep_s` ago or longer; how many were deleted."""
    status = await connection.execute(
        """
        DELETE FROM preemption_task_route WHERE task_id IN (
            SELECT task_id FROM preemption_task_route
            WHERE ended_at IS NOT NULL AND ended_at <= now() - make_interval(secs => $1)
            LIMIT $2
        )
        """,
        keep_s, batch,
    )  # fmt: skip
    return int(status.split()[-1])


@dataclass(slots=True)
class RouteExpiry:
    """The router's pruning schedule (called after each routed batch and each idle poll)."""

    keep_s: float = DEFAULT_KEEP_S
    every_s: float = DEFAULT_EVERY_S
    batch: int = DEFAULT_BATCH
    max_batches: int = DEFAULT_MAX_BATCHES
    next_at: float = 0.0  # monotonic; 0: prune at the first call
    pruned: int = 0

    @classmethod
    def for_window(cls, keep_s: float) -> RouteExpiry:
        """Pruning every tenth of the window, between 1 s and a minute: a short window (tests,
        small clusters) is kept close to its stated length, a long one costs a statement a minute."""
        return cls(keep_s=keep_s, every_s=min(DEFAULT_EVERY_S, max(1.0, keep_s / 10)))

    def __post_init__(self) -> None:
        if self.keep_s < 0 or self.batch <= 0 or self.max_batches <= 0:
            raise ValueError("route expiry: keep_s must be >= 0, batch and max_batches positive")

    async def maybe_prune(self, pool: asyncpg.Pool) -> int:
        """Prune when due; a failure is logged and retried next round (routes are only kept longer)."""
        now = time.monotonic()
        if now < self.next_at:
            return 0
        self.next_at = now + self.every_s
        deleted = 0
        try:
            async with pool.acquire() as connection:
                for _ in range(self.max_batches):
                    n = await prune(connection, keep_s=self.keep_s, batch=self.batch)
                    deleted += n
                    if n < self.batch:
                        break
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("router: pruning ended task routes failed, retried in %.0f s: %r", self.every_s, exc)
        self.pruned += deleted
        return deleted
