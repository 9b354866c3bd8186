"""The eviction cap planned inside the core: a per-pass budget the victim search respects
(services/core/cycle.py, victims_gfs.py) and the runtime's window of recent evictions (runtime.py)."""

from __future__ import annotations

import pytest
from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.cycle import CycleContext, schedule_pool
from gfs.services.core.decisions import EvictTask, StartTask
from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.queues import BucketQueue
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Started, Stopped
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.victims import PreemptionContext
from gfs.services.core.victims_gfs import GfsVictims

T_WIN = 31 * 86400.0


def _runtime(*gpus: int) -> PoolRuntime:
    return PoolRuntime(a_pool(*gpus), build_policy("gfs"), RuntimeSettings(t_win_s=T_WIN, cost_weight=5.0))


def _submit(rt: PoolRuntime, spec: TaskSpec) -> None:
    assert rt.submit(spec, spec.submit_s) is None


def _two_spot_runtime() -> PoolRuntime:
    """Two 2-GPU nodes, each full with one 2-GPU spot task (A on n0, B on n1)."""
    rt = _runtime(2, 2)
    _submit(rt, a_spot("A", gpus=2, submit=0.0))
    _submit(rt, a_spot("B", gpus=2, submit=0.0))
    assert {o.task_id for o in rt.schedule(0.0).outcomes} == {"A", "B"}
    return rt


def _ctx(pool_capacity_budget: int | None) -> CycleContext:
    return CycleContext(
        now=100.0, preemption_enabled=True, quota_enabled=False, quota={}, version=0,
        preemption=PreemptionContext(now=100.0, failed_periods=0, succeeded_periods=0, t_win_s=T_WIN),
        eviction_budget=pool_capacity_budget,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("budget", "started", "evicted"),
    [(None, {"H1", "H2"}, 2), (2, {"H1", "H2"}, 2), (1, {"H1"}, 1), (0, set(), 0)],
    ids=["no-cap", "cap-2", "cap-1", "cap-0"],
)
def test_a_pass_commits_to_no_more_evictions_than_its_budget(
    budget: int | None, started: set[str], evicted: int
) -> None:
    pool = a_pool(2, 2)
    run_on(pool, a_spot("A", gpus=2), (0, 2))
    run_on(pool, a_spot("B", gpus=2), (1, 2))
    policy = build_policy("gfs")
    hp, spot = BucketQueue(policy.hp_order), BucketQueue(policy.spot_order)
    for tid in ("H1", "H2"):
        hp.push(a_task(tid, gpus=2, submit=50.0), 50.0)
    out = schedule_pool(pool, hp, spot, policy, _ctx(budget))
    assert {d.task_id for d in out.decisions if isinstance(d, StartTask)} == started
    assert sum(isinstance(d, EvictTask) for d in out.decisions) == evicted
    if len(started) < 2:
        (memo,) = [m for cls, _, m in out.blocked if cls is TaskClass.HP]
        assert memo.reason is Unschedulable.EVICTION_BUDGET


def test_a_gang_that_would_exceed_the_budget_is_not_started_at_all() -> None:
    pool = a_pool(2, 2)
    run_on(pool, a_spot("A", gpus=2), (0, 2))
    run_on(pool, a_spot("B", gpus=2), (1, 2))
    policy = build_policy("gfs")
    hp, spot = BucketQueue(policy.hp_order), BucketQueue(policy.spot_order)
    hp.push(a_task("G", gpus=2, workers=2, submit=50.0), 50.0)  # needs both nodes: two victims
    out = schedule_pool(pool, hp, spot, policy, _ctx(1))
    assert out.decisions == ()
    (memo,) = [m for _, _, m in out.blocked]
    assert memo.reason is Unschedulable.EVICTION_BUDGET
    assert set(pool.running) == {TaskId("A"), TaskId("B")}  # the pass changed nothing


def test_the_victim_search_prefers_a_plan_within_the_budget() -> None:
    """n0 (2 GPUs) holds two 1-GPU spot tasks: 2 preemptible GPUs, the best fit. n1 (4 GPUs) holds
    one 3-GPU spot task and 1 HP GPU: 3 preemptible. With no cap GFS takes n0 (two victims); with a
    budget of one it goes to the next tier, n1 (one victim)."""
    pool = a_pool(2, 4)
    run_on(pool, a_spot("a1", gpus=1), (0, 1))
    run_on(pool, a_spot("a2", gpus=1), (0, 1))
    run_on(pool, a_spot("b", gpus=3), (1, 3))
    run_on(pool, a_task("h", gpus=1), (1, 1))
    spec = a_task("H", gpus=2, submit=10.0)
    ctx = PreemptionContext(now=10.0, failed_periods=0, succeeded_periods=0, t_win_s=T_WIN)
    free = GfsVictims().plan(pool, spec, ctx)
    assert free is not None and free.node == 0 and set(free.victims) == {"a1", "a2"}
    capped = GfsVictims().plan(pool, spec, ctx._replace(eviction_budget=1))
    assert capped is not None and capped.node == 1 and capped.victims == ("b",)


def test_the_runtime_counts_evictions_in_the_window_and_retries_when_it_slides() -> None:
    rt = _two_spot_runtime()
    rt.set_eviction_cap(1, 3600.0)
    assert rt.cap.budget(10.0) == 1
    _submit(rt, a_task("H1", gpus=2, submit=10.0))
    _submit(rt, a_task("H2", gpus=2, submit=10.0))
    out = rt.schedule(10.0).outcomes
    assert sum(isinstance(o, Stopped) for o in out) == 1
    assert [o.task_id for o in out if isinstance(o, Started)] == ["H1"]
    assert rt.cap.budget(20.0) == 0
    rt.schedule(20.0)
    held = rt.explain(TaskId("H2")).queued
    assert held is not None and held.reason is Unschedulable.EVICTION_BUDGET
    # Still inside the hour: nothing.
    assert not [o for o in rt.schedule(3000.0).outcomes if isinstance(o, Started)]
    # The window slid past the first eviction: the budget is back and the memo is retried.
    out = rt.schedule(3611.0).outcomes
    assert [o.task_id for o in out if isinstance(o, Started)] == ["H2"]
    assert sum(isinstance(o, Stopped) for o in out) == 1


def test_lifting_the_cap_frees_held_tasks_and_bad_caps_raise() -> None:
    rt = _two_spot_runtime()
    rt.set_eviction_cap(0, 600.0)
    _submit(rt, a_task("H", gpus=2, submit=10.0))
    assert not rt.schedule(10.0).outcomes
    rt.set_eviction_cap(None)
    assert rt.cap.budget(11.0) is None
    assert any(isinstance(o, Started) and o.task_id == "H" for o in rt.schedule(11.0).outcomes)
    with pytest.raises(ValueError):
        rt.set_eviction_cap(-1, 60.0)
    with pytest.raises(ValueError):
        rt.set_eviction_cap(1, 2 * 86400.0)


def test_without_a_cap_the_pass_is_unchanged() -> None:
    capped, free = _two_spot_runtime(), _two_spot_runtime()
    capped.set_eviction_cap(10, 3600.0)
    for rt in (capped, free):
        _submit(rt, a_task("H", gpus=2, submit=10.0))
    a = [(type(o).__name__, o.task_id) for o in capped.schedule(10.0).outcomes]
    b = [(type(o).__name__, o.task_id) for o in free.schedule(10.0).outcomes]
    assert a == b and free.cap.budget(10.0) is None
