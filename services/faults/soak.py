"""The soak run (issue 25 item 6, issue 38 item 4): the fault harness's pipeline under steady load
for a long time, the preemption service killed every `kill_every_s`, a broker and a Postgres outage
in its first quarter (when `outage_s` > 0), and every `sample_s` a sample of what must stay
bounded: each process's resident memory, each consumer group's lag, the preemption journal's size.
Per report interval (an hour by default) it prints one line per measure; the harness's end-of-run
checks (0 lost, 0 evicted twice, the ledger) still decide whether the run passed.

Why the preemption service is the one killed: its failover replays the journal, so failover time
against history is the measure that can grow; the other services are killed by the shorter fault
runs. A killed process's memory starts again from zero, so its RSS is read per life (the report
gives the highest and the last sample of the interval; flat memory is judged on the others and on
the preemption service's sample just before each kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from gfs.services.platform.settings import PlatformSettings

# Rows that grow with history (the journal is what a claim replays).
COUNTED_TABLES = ("preemption_journal", "preemption_decision", "outbox")


@dataclass(slots=True)
class SoakSample:
    at_s: float  # since the load started
    rss_mb: dict[str, float]  # per supervised process alive at the time
    lag: dict[str, int]  # per consumer group: end offset minus committed, summed over partitions
    rows: dict[str, int]  # per counted table


@dataclass(slots=True)
class SoakLog:
    samples: list[SoakSample] = field(default_factory=list)
    failovers: list[tuple[float, float]] = field(default_factory=list)  # (at_s, seconds to ready)
    # (at_s, the part that was down, seconds from its return until every service was ready)
    recoveries: list[tuple[float, str, float]] = field(default_factory=list)


def rss_mb(pid: int) -> float | None:
    """Resident memory of one process in MiB (None: gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        return None
    return None


async def group_lags(settings: PlatformSettings, groups: Sequence[str]) -> dict[str, int]:
    """Committed lag per consumer group (a group that has committed nothing yet reads 0)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        out: dict[str, int] = {}
        for group in groups:
            committed = await admin.list_consumer_group_offsets(group)
            tps = [tp for tp, meta in committed.items() if meta is not None and meta.offset >= 0]
            ends = await consumer.end_offsets(tps) if tps else {}
            out[group] = sum(max(0, ends[tp] - committed[tp].offset) for tp in tps)
        return out
    finally:
        await consumer.stop()
        await admin.close()


async def table_rows(dsn: str) -> dict[str, int]:
    connection = await asyncpg.connect(dsn)
    try:
        return {t: int(await connection.fetchval(f"SELECT count(*) FROM {t}")) for t in COUNTED_TABLES}
    finally:
        await connection.close()


async def sample_loop(
    log: SoakLog,
    pids: Callable[[], dict[str, int]],
    settings: PlatformSettings,
    groups: Sequence[str],
    dsn: str,
    every_s: float,
    stop: asyncio.Event,
) -> None:
    """Sample every `every_s` until `stop`; a sample that cannot be taken (the broker or the
    database busy) is skipped, not fatal: the soak is about the services, not the sampler."""
    t0 = time.monotonic()
    while not stop.is_set():
        at = time.monotonic() - t0  # when the sample began (its queries may take a while)
        rss = {name: mb for name, pid in pids().items() if (mb := rss_mb(pid)) is not None}
        lag: dict[str, int] = {}
        rows: dict[str, int] = {}
        with contextlib.suppress(Exception):
            lag = await group_lags(settings, groups)
        with contextlib.suppress(Exception):
            rows = await table_rows(dsn)
        log.samples.append(SoakSample(at, rss, lag, rows))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)


def kill_schedule(soak_s: float, kill_every_s: float) -> list[tuple[float, str]]:
    """The preemption service killed every `kill_every_s` of the soak (none in its last minute, so
    the last failover is measured under load too)."""
    if kill_every_s <= 0:
        return []
    out = []
    at = kill_every_s
    while at <= soak_s - 60.0:
        out.append((at, "kill:preemption"))
        at += kill_every_s
    return out


def summarize(log: SoakLog, interval_s: float, until_s: float | None = None) -> list[dict[str, Any]]:
    """Per interval: RSS (MiB) max and last per process, lag max per group, rows at its end,
    failover times; plus each process's RSS change from the first interval's median (the
    'flat memory' measure, for processes that were not killed)."""
    # A sample begun as the soak ended (`until_s`, its length) belongs to no interval of it.
    samples = [s for s in log.samples if until_s is None or s.at_s < until_s]
    if not samples:
        return []
    first_median: dict[str, float] = {}
    first = [s for s in samples if s.at_s < interval_s]
    for name in {n for s in first for n in s.rss_mb}:
        first_median[name] = statistics.median(s.rss_mb[name] for s in first if name in s.rss_mb)
    out = []
    n = int(max(s.at_s for s in samples) // interval_s) + 1
    for k in range(n):
        lo, hi = k * interval_s, (k + 1) * interval_s
        mine = [s for s in samples if lo <= s.at_s < hi]
        if not mine:
            continue
        names = sorted({n for s in mine for n in s.rss_mb})
        rss = {}
        for name in names:
            values = [s.rss_mb[name] for s in mine if name in s.rss_mb]
            median = statistics.median(values)
            base = first_median.get(name)
            rss[name] = {
                "max": round(max(values), 1),
                "last": round(values[-1], 1),
                "median": round(median, 1),
                "vs_first": round(median / base - 1.0, 3) if base else None,
            }
        groups = sorted({g for s in mine for g in s.lag})
        failovers = [round(sec, 2) for at, sec in log.failovers if lo <= at < hi]
        recoveries = [f"{what} {sec:.1f}" for at, what, sec in log.recoveries if lo <= at < hi]
        rows = next((s.rows for s in reversed(mine) if s.rows), {})
        out.append({
            "interval": k,
            "from_s": lo,
            "samples": len(mine),
            "rss_mb": rss,
            "lag_max": {g: max(s.lag.get(g, 0) for s in mine) for g in groups},
            "rows": rows,
            "failover_s": failovers,
            "outage_recovery_s": recoveries,
        })  # fmt: skip
    return out


def render(summary: Sequence[dict[str, Any]]) -> str:
    lines = []
    for row in summary:
        rss = ", ".join(
            f"{n} {v['median']:.0f} MiB{_change(v['vs_first'])}" for n, v in row["rss_mb"].items()
        )
        lags = ", ".join(f"{g} {v}" for g, v in row["lag_max"].items())
        rows = ", ".join(f"{t} {v:,}" for t, v in row["rows"].items())
        fo = ", ".join(f"{s:.1f}" for s in row["failover_s"]) or "-"
        outages = ", ".join(row.get("outage_recovery_s", ())) or "-"
        lines.append(
            f"interval {row['interval']} (+{row['from_s']:.0f} s): RSS median {rss}; lag max {lags}; "
            f"rows {rows}; failover s {fo}; outage recovery s {outages}"
        )
    growth = late_growth(summary)
    if growth:
        lines.append(
            "RSS growth, last interval's median vs the one 30 min before: "
            + ", ".join(f"{n} {100 * g:+.1f}%" for n, g in sorted(growth.items()))
        )
    return "\n".join(lines)


def late_growth(summary: Sequence[dict[str, Any]], window_s: float = 1800.0) -> dict[str, float]:
    """Per process: the last interval's median RSS against the median of the interval that began
    `window_s` before it (the soak's flat-memory measure, issue 38: under 5% over the last 30
    minutes). Empty when the soak is shorter than that. A process restarted in between (the
    preemption service, killed every `kill_every_s`) compares two lives; its per-life figure is the
    interval's max before each kill."""
    if not summary:
        return {}
    last = summary[-1]
    earlier = [r for r in summary if r["from_s"] <= last["from_s"] - window_s]
    if not earlier:
        return {}
    base = earlier[-1]
    return {
        name: value["median"] / base["rss_mb"][name]["median"] - 1.0
        for name, value in last["rss_mb"].items()
        if name in base["rss_mb"] and base["rss_mb"][name]["median"] > 0
    }


def _change(vs_first: float | None) -> str:
    return "" if vs_first is None else f" ({100 * vs_first:+.0f}%)"
