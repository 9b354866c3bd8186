"""Retention of the services' history tables: what a service that runs for months deletes, and when.

Every row here is history nobody replays: the quota versions and eta history (the SRE API and the
demo's report read recent ones), the guarantee-period outcomes (the quota's feedback reads the last
`feedback_window_s`, 4 h by default), the preemption decisions (`gfs explain`, the dashboard, the
parity and bench read-backs of one run) and the outbox rows the relay already published. Without
this they grow by every refresh, period and decision, forever (docs/operations.md, "Retention").

Not here, on purpose: the preemption journal (a full replay after an upgrade and the event-id
de-duplication read it; docs/decisions.md), its snapshots (snapshots.py keeps two), the router's
task routes (router/expiry.py), the controls and their audit (an operator's record), and the latest
row of each pool (`quota_pool`, `spot_quota`, `quota_input_latest` are one row per pool already).

Each rule names the time that ages its rows:
- `service`: the service's own clock (the topic clock in the demo and the parity runs, where the
  rows carry sample time, not the wall clock), passed in as the cutoff;
- `database`: Postgres `now()`, for rows stamped by the database (`outbox.published_at`).
The newest row of each pool is never deleted (`keep_newest_per`), so a pool whose quota service
has been down longer than the window still shows its last quota version.

Rows go in batches of `batch` (one statement each, at most `max_batches` a round), so a first run
against months of history does not hold locks or bloat one transaction; the next round goes on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg

from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.timer import FailureCounter, every

log = logging.getLogger(__name__)

DEFAULT_BATCH = 1_000
DEFAULT_MAX_BATCHES = 20


@dataclass(frozen=True, slots=True)
class Rule:
    """One table's retention. Identifiers are constants of this module, never user input."""

    table: str
    time_column: str
    history: bool  # True: kept `history_keep_s`; False: the outbox's `outbox_keep_s`
    clock: Literal["service", "database"] = "service"
    keep_newest_per: str | None = None  # never delete the newest row per value of this column

    def statement(self) -> str:
        """DELETE of at most $2 rows older than the cutoff $1 (a timestamptz)."""
        newest = ""
        if self.keep_newest_per is not None:
            k, t = self.keep_newest_per, self.time_column
            newest = f" AND r.{t} < (SELECT max(n.{t}) FROM {self.table} n WHERE n.{k} = r.{k})"
        return (
            f"DELETE FROM {self.table} WHERE ctid = ANY(ARRAY("
            f"SELECT r.ctid FROM {self.table} r WHERE r.{self.time_column} < $1{newest} LIMIT $2))"
        )


# Which service prunes which table: the one whose role owns it (services/platform/db_roles.py).
QUOTA_RULES: tuple[Rule, ...] = (
    Rule("quota_version", "computed_at", history=True, keep_newest_per="pool"),
    Rule("quota_eta_history", "computed_at", history=True, keep_newest_per="pool"),
    Rule("guarantee_period_outcome", "period_end", history=True),
)
PREEMPTION_RULES: tuple[Rule, ...] = (Rule("preemption_decision", "at", history=True),)
# Both services relay through the one outbox table; either may prune what was published (a row not
# published yet has published_at NULL, which is never older than a cutoff: it stays).
OUTBOX_RULE = Rule("outbox", "published_at", history=False, clock="database")


@dataclass(frozen=True, slots=True)
class Retention:
    """How long history is kept and how often a service prunes (0 = never: keep everything).
    Defaults in PlatformSettings: a month of history, a day of published outbox rows, every 10 min."""

    history_keep_s: float
    outbox_keep_s: float
    every_s: float
    batch: int = DEFAULT_BATCH
    max_batches: int = DEFAULT_MAX_BATCHES

    def __post_init__(self) -> None:
        if self.history_keep_s <= 0 or self.outbox_keep_s <= 0:
            raise ValueError("retention: the keep windows must be > 0 seconds")
        if self.every_s < 0 or self.batch <= 0 or self.max_batches <= 0:
            raise ValueError("retention: every_s must be >= 0, batch and max_batches positive")

    @classmethod
    def of(cls, settings: PlatformSettings) -> Retention:
        """GFS_HISTORY_KEEP_S, GFS_OUTBOX_KEEP_S, GFS_RETENTION_EVERY_S."""
        return cls(settings.gfs_history_keep_s, settings.gfs_outbox_keep_s, settings.gfs_retention_every_s)

    @property
    def enabled(self) -> bool:
        return self.every_s > 0

    def keep_s(self, rule: Rule) -> float:
        return self.history_keep_s if rule.history else self.outbox_keep_s


async def prune_table(
    connection: asyncpg.Connection, rule: Rule, cutoff: datetime, *, batch: int, max_batches: int
) -> int:
    """Delete `rule.table`'s rows older than `cutoff`, batch by batch; how many went."""
    statement = rule.statement()
    deleted = 0
    for _ in range(max_batches):
        status = await connection.execute(statement, cutoff, batch)
        n = int(status.split()[-1])
        deleted += n
        if n < batch:
            break
    return deleted


async def prune(
    pool: asyncpg.Pool,
    rules: Sequence[Rule],
    retention: Retention,
    service_now: Callable[[], float],
) -> dict[str, int]:
    """One round over `rules`; rows deleted per table. A table that fails is logged and retried
    next round (its rows are only kept longer); the others still go."""
    out: dict[str, int] = {}
    async with pool.acquire() as connection:
        for rule in rules:
            keep = timedelta(seconds=retention.keep_s(rule))
            if rule.clock == "database":
                now = await connection.fetchval("SELECT now()")
            else:
                now = datetime.fromtimestamp(service_now(), UTC)
            try:
                cutoff = now - keep
            except OverflowError:  # a window longer than the calendar: nothing is that old
                cutoff = datetime.min.replace(tzinfo=UTC)
            try:
                out[rule.table] = await prune_table(
                    connection, rule, cutoff, batch=retention.batch, max_batches=retention.max_batches
                )
            except asyncpg.PostgresError as exc:
                log.warning("retention: pruning %s failed, retried next round: %r", rule.table, exc)
    if any(out.values()):
        log.info("retention: deleted %s", ", ".join(f"{n} from {t}" for t, n in out.items() if n))
    return out


def pruning(
    pool: asyncpg.Pool,
    rules: Sequence[Rule],
    settings: PlatformSettings,
    service_now: Callable[[], float],
    stop: asyncio.Event,
    *,
    name: str,
    failures: FailureCounter | None = None,
) -> Coroutine[Any, Any, None] | None:
    """A service's pruning job on the platform timer (None when GFS_RETENTION_EVERY_S is 0)."""
    retention = Retention.of(settings)
    if not retention.enabled:
        return None
    action = functools.partial(prune, pool, rules, retention, service_now)
    return every(retention.every_s, stop, action, name=name, failures=failures)
