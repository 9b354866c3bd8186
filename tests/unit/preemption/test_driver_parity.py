"""Parity on the one per-pool driver (services/core/driver): the same scenario through the
simulator's engine and through the live service's controller gives the same decisions and the
same guarantee ledger, both worked out by hand. (tests/integration/test_sim_live_parity.py stays
the end-to-end proof, over Kafka and Postgres.)

The scenario (the simulator's golden "one preemption"): one node n0 of 8 GPUs, spot quota 8.
- 0: s1 (spot, 8 GPUs, 7200 s) arrives and starts on n0.
- 3600: s1's first guarantee period closes without eviction: a success at 3600.
- 5400: h1 (HP, 4 GPUs, 3600 s) arrives; nothing is free, so s1 (the only spot task) is evicted
  for it: s1 ran 5400 s, its interrupted second period fails at 5400. h1 starts at 5400.
- 7200: s1's second period would have closed; s1 was evicted, so its timer fires nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from builders import a_job, a_node, a_trace

from gfs.schemas.commands import EvictCommand
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed, TaskClass, TaskSubmitted
from gfs.services.core.ids import PoolId
from gfs.services.core.outcomes import PassResult, Started
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.runtime import PoolRuntime
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.types import Effects
from gfs.services.simulator.engine import Simulation
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare

T0 = 1_800_000_000.0
Effect = tuple[float, str, str, str | None]  # (time, period | evict | start, task, preemptor)
UNTIL_S = 7200.0  # the scenario's span; the simulation goes on after it (its drain)
EXPECTED = [
    (0.0, "start", "s1", None),
    (3600.0, "period", "s1", None),
    (5400.0, "evict", "s1", "h1"),
    (5400.0, "start", "h1", None),
]
LEDGER = ((5400.0,), (3600.0,))  # (failure times, success times) up to UNTIL_S


def in_order(effects: list[Effect]) -> list[Effect]:
    """By time; at one instant the timers, then a pass's evictions, then its starts (the live
    effects come in lists by kind, not in one sequence)."""
    rank = {"period": 0, "evict": 1, "start": 2}
    return sorted(effects, key=lambda e: (e[0], rank[e[1]]))


def simulated() -> tuple[list[Effect], tuple[tuple[float, ...], ...]]:
    trace = a_trace(
        [a_node("n0", gpus=8)],
        [
            a_job("s1", cls="SPOT", gpus=8, submit=0, duration=7200),
            a_job("h1", gpus=4, submit=5400, duration=3600),
        ],
    )
    settings = RunSettings()
    workload, demand = prepare(trace, settings)
    seen: list[Effect] = []

    def decisions(sim: Simulation, rt: PoolRuntime, result: PassResult) -> None:
        for o in result.outcomes:
            if isinstance(o, Started):
                seen.append((sim.now, "start", o.task_id, None))
            else:
                seen.append((sim.now, "evict", o.task_id, o.preemptor))

    sim = build_simulation(workload, demand, build_policy("gfs"), settings, decisions)
    driver = sim.drivers[PoolId("P")]
    periods: list[Effect] = []
    advance = driver.advance

    def advance_recorded(now: float) -> list:  # type: ignore[type-arg]
        closed = advance(now)
        periods.extend((c.end, "period", c.task_id, None) for c in closed)
        return closed

    driver.advance = advance_recorded  # type: ignore[method-assign]
    sim.run()
    effects = in_order([*seen, *periods])
    failures, successes = driver.ledger.outcome_times()
    ledger = tuple(tuple(t for t in ts if t <= UNTIL_S) for ts in (failures, successes))
    return [e for e in effects if e[0] <= UNTIL_S], ledger


def live() -> tuple[list[Effect], tuple[tuple[float, ...], ...]]:
    c = PoolController("P")
    effects: list[Effect] = []

    def record(out: Effects, t: float) -> None:
        for d in out.decisions:
            if d.kind == "started":
                effects.append((t, "start", d.task_id, None))
        for command in out.commands:
            if isinstance(command, EvictCommand):
                effects.append((t, "evict", command.task_ids[0], command.preemptor_task_id))
        for event in out.events:
            if isinstance(event, GuaranteePeriodClosed) and event.outcome is GuaranteeOutcome.SUCCEEDED:
                effects.append((event.period_end.timestamp() - T0, "period", event.task_id, None))

    def at(s: float) -> datetime:
        return datetime.fromtimestamp(T0 + s, UTC)

    def task(tid: str, cls: TaskClass, gpus: float, duration: float) -> TaskSubmitted:
        return TaskSubmitted(
            task_id=tid, tenant="org", gpu_model="P", gpus_per_worker=gpus, workers=1,
            task_class=cls, command=("gfs", "fake-task"), expected_duration_s=duration,
        )  # fmt: skip

    quota = SpotQuota(
        pool="P", quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=8) for h in (1, 2, 4)),
        eta=1.0, capacity_gpus=8, valid_from=at(0), valid_until=at(86400), forecast_version="m:1",
    )  # fmt: skip
    c.node_seen("n0", 8, T0)
    c.quota(quota, T0)
    c.submit(task("s1", TaskClass.SPOT, 8, 7200), T0)
    record(c.clock("PASS", 1, T0), 0.0)
    record(c.clock("ADVANCE", 2, T0 + 3600), 3600.0)
    c.submit(task("h1", TaskClass.HP, 4, 3600), T0 + 5400)
    record(c.clock("ADVANCE", 3, T0 + 5400), 5400.0)
    record(c.clock("PASS", 4, T0 + 5400), 5400.0)
    record(c.clock("ADVANCE", 5, T0 + UNTIL_S), UNTIL_S)
    failures, successes = c.driver.ledger.outcome_times()
    return in_order(effects), (tuple(t - T0 for t in failures), tuple(t - T0 for t in successes))


def test_the_simulator_and_the_controller_drive_the_pool_alike() -> None:
    sim_effects, sim_ledger = simulated()
    live_effects, live_ledger = live()
    assert sim_effects == EXPECTED
    assert live_effects == EXPECTED
    assert sim_ledger == live_ledger == LEDGER
