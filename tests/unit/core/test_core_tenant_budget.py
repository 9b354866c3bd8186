"""Per-tenant eviction budgets in the victim choice (issue 27 item 3): core/tenant_budget.py, the
GFS selector (victims_gfs.py), the pass (cycle.py) and the runtime's windows (runtime.py).

Every expectation is worked by hand from the node cost (spec 5.2): with no failed or succeeded
periods yet, one victim gives the rate term 1/1 on every node, so the lost-GPU-time term
5 * sum(c_j) / (C * T_win) decides, i.e. the victim that ran the shortest goes first.
"""

from __future__ import annotations

import pytest
from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.cycle import CycleContext, schedule_pool
from gfs.services.core.decisions import Decision, EvictTask, StartTask
from gfs.services.core.ids import TaskId, TenantId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Stopped
from gfs.services.core.task import TaskSpec
from gfs.services.core.tenant_budget import DAY_S, BudgetWindow, TenantBudget, TenantEvictions
from gfs.services.core.victims import PreemptionContext, PreemptionPlan
from gfs.services.core.victims_gfs import GfsVictims

T_WIN = 31 * 86400.0
X, Y = TenantId("x"), TenantId("y")


def _ctx(now: float = 100.0, left: dict[TenantId, int] | None = None) -> PreemptionContext:
    return PreemptionContext(now=now, failed_periods=0, succeeded_periods=0, t_win_s=T_WIN, tenant_left=left)


Running = list[tuple[str, str, int, int, float]]  # (task, tenant, node, GPUs, start)


def _pool(pool_gpus: tuple[int, ...], running: Running) -> PoolState:
    pool = a_pool(*pool_gpus)
    for tid, tenant, node, gpus, start in running:
        run_on(pool, a_spot(tid, gpus=gpus, tenant=tenant), (node, gpus), start=start)
    return pool


def _victims(
    pool_gpus: tuple[int, ...], running: Running, need: int, left: dict[TenantId, int] | None
) -> PreemptionPlan | None:
    return GfsVictims().plan(_pool(pool_gpus, running), a_task("H", gpus=need), _ctx(left=left))


# Two 1-GPU nodes: A (tenant x) ran 10 s on n0, B (tenant y) 100 s on n1. The node cost of n0 is
# 1 + 5*10/(2*T_win), of n1 1 + 5*100/(2*T_win): A is the cheapest victim.
ACROSS = [("A", "x", 0, 1, 90.0), ("B", "y", 1, 1, 0.0)]


@pytest.mark.parametrize(
    ("left", "node", "victims"),
    [
        (None, 0, ("A",)),  # no budgets: today's choice
        ({X: 1}, 0, ("A",)),  # x may still take one eviction
        ({X: 0}, 1, ("B",)),  # x exhausted: the next cheapest, another tenant's
        ({Y: 0}, 0, ("A",)),  # only y is budgeted, and A is not y's
    ],
)
def test_the_cheapest_victim_of_an_exhausted_tenant_is_passed_over_for_another_node(
    left: dict[TenantId, int] | None, node: int, victims: tuple[str, ...]
) -> None:
    plan = _victims((1, 1), ACROSS, 1, left)
    assert plan is not None
    assert (plan.node, plan.victims, plan.over_budget) == (node, victims, 0)


def test_on_one_node_the_other_tenants_task_is_evicted_instead() -> None:
    # One 2-GPU node, A (x, ran 10 s) and B (y, ran 100 s) on a GPU each; the HP task needs one.
    # Two-pointer, costs descending [B, A]: B can be spared (one GPU left), A cannot -> A goes.
    # With x out of budget A is kept, so its GPU cannot be freed: B must go.
    running = [("A", "x", 0, 1, 90.0), ("B", "y", 0, 1, 0.0)]
    plain = _victims((2,), running, 1, None)
    budgeted = _victims((2,), running, 1, {X: 0})
    assert plain is not None and plain.victims == ("A",)
    assert budgeted is not None and budgeted.victims == ("B",)
    # Node cost with B: 1 + 5*100/(2*T_win).
    assert budgeted.cost == pytest.approx(1.0 + 5 * 100.0 / (2 * T_WIN))


def test_a_tenant_with_budget_left_for_one_victim_loses_only_one() -> None:
    # One 3-GPU node: A1, A2 (x, ran 10 s each) and B (y, ran 100 s); the HP task needs 2 GPUs.
    # Unbudgeted two-pointer on [B, A1, A2] (cost desc, ties by id): spare B (2 left), A1 cannot
    # be spared -> evict; from the cheap end A2 cannot be spared either -> evict: {A1, A2}.
    # x may lose one: the costlier of its victims (a tie: the first id, A1) is spared; on the
    # GPUs left [B, A2] neither can be spared: {B, A2}, cost (0+2)/(0+0+2) + 5*110/(3*T_win).
    running = [("A1", "x", 0, 1, 90.0), ("A2", "x", 0, 1, 90.0), ("B", "y", 0, 1, 0.0)]
    plain = _victims((3,), running, 2, None)
    assert plain is not None and set(plain.victims) == {"A1", "A2"}
    plan = _victims((3,), running, 2, {X: 1})
    assert plan is not None
    assert (set(plan.victims), plan.over_budget) == ({"B", "A2"}, 0)
    assert plan.cost == pytest.approx(1.0 + 5 * 110.0 / (3 * T_WIN))


def test_when_every_set_breaks_a_budget_the_least_over_one_is_chosen_and_hp_still_placed() -> None:
    # n0: A, B (x, ran 100 s each); n1: C, D (y, ran 10 s each); the HP task needs 2 GPUs, so a
    # node's two tasks go. Unbudgeted: n1 (lost 20 s < 200 s). x may lose 1 (n0: 1 over), y none
    # (n1: 2 over): n0, one victim over budget.
    running = [("A", "x", 0, 1, 0.0), ("B", "x", 0, 1, 0.0), ("C", "y", 1, 1, 90.0), ("D", "y", 1, 1, 90.0)]
    plain = _victims((2, 2), running, 2, None)
    assert plain is not None and plain.node == 1
    plan = _victims((2, 2), running, 2, {X: 1, Y: 0})
    assert plan is not None
    assert (plan.node, set(plan.victims), plan.over_budget) == (0, {"A", "B"}, 1)
    # In a pass the HP task starts on it (the budget is soft, unlike the pool cap).
    out = _pass(_pool((2, 2), running), [a_task("H", gpus=2, submit=50.0)], {X: 1, Y: 0})
    assert [d.task_id for d in out if isinstance(d, StartTask)] == ["H"]
    assert {d.task_id for d in out if isinstance(d, EvictTask)} == {"A", "B"}


def _pass(
    pool: PoolState, hp_tasks: list[TaskSpec], left: dict[TenantId, int] | None
) -> tuple[Decision, ...]:
    policy = build_policy("gfs")
    hp, spot = BucketQueue(policy.hp_order), BucketQueue(policy.spot_order)
    for spec in hp_tasks:
        hp.push(spec, spec.submit_s)
    ctx = CycleContext(
        now=100.0, preemption_enabled=True, quota_enabled=False, quota={}, version=0,
        preemption=_ctx(100.0, left),
    )  # fmt: skip
    return schedule_pool(pool, hp, spot, policy, ctx).decisions


def test_a_pass_counts_the_budget_it_spends_across_hp_tasks() -> None:
    # Three 1-GPU nodes: A1, A2 (x, ran 10 s) and B (y, ran 100 s); two 1-GPU HP tasks in one
    # pass, x may lose one. H1 takes A1 (cheapest, ties by node); x is then out for this pass,
    # so H2 takes B, not A2.
    pool = a_pool(1, 1, 1)
    run_on(pool, a_spot("A1", tenant="x"), (0, 1), start=90.0)
    run_on(pool, a_spot("A2", tenant="x"), (1, 1), start=90.0)
    run_on(pool, a_spot("B", tenant="y"), (2, 1), start=0.0)
    hp = [a_task("H1", submit=50.0), a_task("H2", submit=60.0)]
    evicted = [d.task_id for d in _pass(pool, hp, {X: 1}) if isinstance(d, EvictTask)]
    assert evicted == ["A1", "B"]


# ----- the windows ---------------------------------------------------------------------------------
def test_the_day_window_rolls_at_exactly_24_hours() -> None:
    log = TenantEvictions()
    log.set_budget(X, TenantBudget(2, BudgetWindow.DAY))
    log.evicted(X, 100.0)
    log.evicted(X, 5000.0)
    log.evicted(Y, 200.0)  # another tenant's eviction counts against nothing of x's
    assert log.left(5000.0) == {X: 0}
    assert log.left(100.0 + DAY_S - 1.0) == {X: 0}
    assert log.left(100.0 + DAY_S) == {X: 1}  # the eviction at 100 s is exactly a day old
    assert log.left(5000.0 + DAY_S) == {X: 2}


def test_the_periods_window_counts_failures_among_the_last_100_periods() -> None:
    log = TenantEvictions()
    log.set_budget(X, TenantBudget(1, BudgetWindow.PERIODS))
    log.periods(X, 3, failed=True)  # 3 successes then an eviction
    assert log.left(0.0) == {X: 0}
    log.periods(X, 99, failed=False)  # the failure is among the last 100 (99 successes after it)
    assert log.left(0.0) == {X: 0}
    log.periods(X, 1, failed=False)  # 100 periods since: it left the window
    assert log.left(0.0) == {X: 1}


def test_a_budget_can_be_lifted_and_never_goes_negative() -> None:
    log = TenantEvictions()
    log.set_budget(X, TenantBudget(1))
    for t in (1.0, 2.0, 3.0):
        log.evicted(X, t)
    assert log.left(3.0) == {X: 0}
    log.set_budget(X, None)
    assert log.left(3.0) == {}
    with pytest.raises(ValueError):
        TenantBudget(-1)


# ----- the runtime ---------------------------------------------------------------------------------
def _three_node_runtime(budget: TenantBudget | None) -> PoolRuntime:
    """Three 1-GPU nodes: B (y) from 0 s, A1 (x) from 10 s, A2 (x) from 20 s; H1 at 100 s evicts
    A2 (ran 80 s, the shortest) whatever the budget (x may lose one a day)."""
    rt = PoolRuntime(a_pool(1, 1, 1), build_policy("gfs"), RuntimeSettings(t_win_s=T_WIN, cost_weight=5.0))
    if budget is not None:
        rt.tenant_evictions.set_budget(X, budget)
    for tid, tenant, at in (("B", "y", 0.0), ("A1", "x", 10.0), ("A2", "x", 20.0)):
        assert rt.submit(a_spot(tid, tenant=tenant, submit=at, duration=10 * DAY_S), at) is None
        rt.schedule(at)
    assert rt.submit(a_task("H1", submit=100.0, duration=10 * DAY_S), 100.0) is None
    stops = [o.task_id for o in rt.schedule(100.0).outcomes if isinstance(o, Stopped)]
    assert stops == ["A2"]
    return rt


def _evicted_at(rt: PoolRuntime, now: float) -> list[TaskId]:
    assert rt.submit(a_task("H2", submit=now, duration=3600.0), now) is None
    return [o.task_id for o in rt.schedule(now).outcomes if isinstance(o, Stopped)]


@pytest.mark.parametrize(
    ("budget", "at", "evicted", "left_before"),
    [
        (None, 50_000.0, ["A1"], {}),  # no budget: A1 ran shorter than B
        (TenantBudget(1), 50_000.0, ["B"], {X: 0}),  # x spent its one eviction at 100 s
        (TenantBudget(1), 100.0 + DAY_S - 1.0, ["B"], {X: 0}),  # still inside the day
        (TenantBudget(1), 100.0 + DAY_S, ["A1"], {X: 1}),  # the window rolled
        (TenantBudget(2), 50_000.0, ["A1"], {X: 1}),
    ],
)
def test_the_runtime_steers_victims_by_the_rolling_budget(
    budget: TenantBudget | None, at: float, evicted: list[str], left_before: dict[TenantId, int]
) -> None:
    rt = _three_node_runtime(budget)
    assert rt.tenant_evictions.left(at) == left_before
    assert _evicted_at(rt, at) == evicted


def test_the_runtime_counts_a_tenants_periods_for_the_per_100_budget() -> None:
    rt = _three_node_runtime(TenantBudget(1, BudgetWindow.PERIODS))
    assert rt.tenant_evictions.left(100.0) == {X: 0}  # A2's interrupted period failed
    assert _evicted_at(rt, 200.0) == ["B"]
