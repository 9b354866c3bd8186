"""Invariants of the pure core under random pools, tasks and passes (hypothesis)."""

from __future__ import annotations

import numpy as np
from builders import a_pool, a_spot, a_task
from hypothesis import given
from hypothesis import strategies as st

from gfs.services.core.cycle import CycleContext, schedule_pool
from gfs.services.core.decisions import EvictTask, StartTask, WorkerPlacement
from gfs.services.core.placement import BestFit, place_task
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.queues import BucketQueue
from gfs.services.core.quota import ForecastQuota, QuotaInputs
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.victims import PreemptionContext
from gfs.services.core.victims_gfs import GfsVictims

NODE_SIZES = st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6)
TASK = st.tuples(
    st.sampled_from([TaskClass.HP, TaskClass.SPOT, TaskClass.SPOT]),  # spot-heavy: more victims
    st.sampled_from([1, 2, 4, 8]),
    st.integers(min_value=1, max_value=3),
    st.floats(min_value=0, max_value=1000),
)
FRACTIONAL_TASK = st.tuples(
    st.sampled_from([TaskClass.HP, TaskClass.SPOT, TaskClass.SPOT]),  # spot-heavy: more victims
    st.sampled_from([0.25, 0.5, 1, 2, 4, 8]),
    st.integers(min_value=1, max_value=3),
    st.floats(min_value=0, max_value=1000),
)


def _spec(i: int, t: tuple[TaskClass, float, int, float]) -> TaskSpec:
    cls, g, w, start = t
    return a_task(f"t{i:03d}", cls=cls, gpus=g, workers=w, submit=start)


def _fill(pool: PoolState, tasks: list[tuple[TaskClass, float, int, float]]) -> None:
    for i, t in enumerate(tasks):
        spec = _spec(i, t)
        placements = place_task(pool, spec, BestFit())
        if placements is not None:
            pool.add_task(RunningTask(spec, spec.submit_s, placements))


def _ctx(now: float = 2000.0) -> PreemptionContext:
    return PreemptionContext(now=now, failed_periods=3, succeeded_periods=10, t_win_s=2678400.0)


def _consistent(pool: PoolState) -> None:
    assert (pool.free >= 0).all()
    assert (pool.free + pool.hp_gpus + pool.spot_gpus == pool.node_cap).all()
    assert (pool.gpu_hp + pool.gpu_spot <= 1.0 + 1e-9).all()


@given(NODE_SIZES, st.lists(TASK, min_size=4, max_size=20), st.sampled_from([1, 2, 4, 8]))
def test_gfs_victims_are_spot_sufficient_and_each_necessary(
    sizes: list[int], tasks: list[tuple[TaskClass, float, int, float]], k: int
) -> None:
    pool = a_pool(*sizes)
    _fill(pool, tasks)
    hp = a_task("preemptor", gpus=k)
    if place_task(pool, hp, BestFit()) is not None:
        return  # preemption only runs when normal placement fails
    plan = GfsVictims().plan(pool, hp, _ctx())
    if plan is None:
        assert not (pool.non_hp >= k).any()
        return
    assert all(pool.running[v].spec.task_class is TaskClass.SPOT for v in plan.victims)
    pool.begin()
    for v in plan.victims:
        pool.remove_task(v)
    assert pool.free[plan.node] >= k  # after the evictions the HP worker fits
    pool.rollback()
    for spared in plan.victims:  # no single victim could have been spared
        pool.begin()
        for v in plan.victims:
            if v != spared:
                pool.remove_task(v)
        assert pool.free[plan.node] < k
        pool.rollback()


@given(
    NODE_SIZES,
    st.lists(FRACTIONAL_TASK, max_size=14),
    st.lists(FRACTIONAL_TASK, max_size=6),
    st.sampled_from(["gfs", "fifo"]),
    st.floats(min_value=0, max_value=64),
)
def test_pass_never_over_allocates_and_leaves_state_unchanged(
    sizes: list[int],
    running: list[tuple[TaskClass, float, int, float]],
    queued: list[tuple[TaskClass, float, int, float]],
    policy_name: str,
    quota: float,
) -> None:
    policy = build_policy(policy_name)
    pool = a_pool(*sizes)
    _fill(pool, running)
    _consistent(pool)
    hp, spot = BucketQueue(policy.hp_order), BucketQueue(policy.spot_order)
    for i, t in enumerate(queued):
        spec = a_task(f"q{i:03d}", cls=t[0], gpus=t[1], workers=t[2], submit=t[3])
        (hp if spec.task_class is TaskClass.HP else spot).push(spec, spec.submit_s)
    snapshot = (
        pool.free.copy(),
        pool.hp_gpus.copy(),
        pool.spot_gpus.copy(),
        pool.gpu_hp.copy(),
        pool.gpu_spot.copy(),
        dict(pool.running),
        pool.spot_in_use,
    )
    ctx = CycleContext(
        now=2000.0,
        preemption_enabled=True,
        quota_enabled=True,
        quota=dict.fromkeys(range(1, 5), quota),
        preemption=_ctx(),
        version=0,
    )
    outcome = schedule_pool(pool, hp, spot, policy, ctx)
    after = (pool.free, pool.hp_gpus, pool.spot_gpus, pool.gpu_hp, pool.gpu_spot)
    assert all(np.array_equal(a, b) for a, b in zip(snapshot[:5], after, strict=True))
    assert snapshot[5] == pool.running and abs(snapshot[6] - pool.spot_in_use) < 1e-9
    # apply the decisions like the simulator: still consistent, victims were spot, spot under quota
    for d in outcome.decisions:
        if isinstance(d, EvictTask):
            assert pool.running[d.task_id].spec.task_class is TaskClass.SPOT
            pool.remove_task(d.task_id)
        else:
            assert isinstance(d, StartTask)
            queue = hp if d.task_id in hp else spot
            spec = queue.remove(d.task_id)
            pool.add_task(RunningTask(spec, 2000.0, d.placements))
            if spec.task_class is TaskClass.SPOT:
                assert pool.spot_in_use <= quota + 1e-9 or not pool.spot_in_use
        _consistent(pool)


@given(
    st.lists(st.floats(min_value=-100, max_value=500), min_size=4, max_size=4),
    st.integers(min_value=0, max_value=300),
    st.floats(min_value=0.1, max_value=1.5),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=50),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1e5)),
)
def test_quota_never_negative(
    quantile: list[float], capacity: int, eta: float, failed: int, succeeded: int, head_wait: float | None
) -> None:
    out = ForecastQuota().refresh(
        QuotaInputs(
            capacity=capacity,
            idle_gpus=0,
            spot_in_use=0.0,
            hp_quantile=np.asarray(quantile),
            eta=eta,
            failed_recent=failed,
            succeeded_recent=succeeded,
            head_wait_s=head_wait,
        )
    )
    assert min(out.quota.values()) >= 0.0
    assert 0.1 <= out.eta <= 1.5


def test_spot_builder_is_spot() -> None:
    assert a_spot().task_class is TaskClass.SPOT


@given(
    st.lists(st.tuples(st.integers(1, 4), st.floats(0, 1000)), min_size=2, max_size=6),
    st.integers(0, 3),
    st.integers(1, 8),
)
def test_gfs_two_pointer_on_one_crowded_node(spot: list[tuple[int, float]], hp_gpus: int, k: int) -> None:
    """One 8-GPU node crowded with small spot tasks: many-victim plans are exercised here."""
    pool = a_pool(8)
    if hp_gpus:
        pool.add_task(RunningTask(a_task("hp0", gpus=hp_gpus), 0.0, (WorkerPlacement(0, hp_gpus),)))
    for i, (g, start) in enumerate(spot):
        if pool.free[0] >= g:
            pool.add_task(RunningTask(a_spot(f"s{i}", gpus=g), start, (WorkerPlacement(0, g),)))
    if not (pool.free[0] < k <= 8 - hp_gpus):
        return
    plan = GfsVictims().plan(pool, a_task("h", gpus=k), _ctx())
    assert plan is not None
    held = pool.spot_whole[0]
    freed = int(pool.free[0]) + sum(held[v] for v in plan.victims)
    assert freed >= k
    for v in plan.victims:
        assert freed - held[v] < k  # sparing any single victim leaves too little


def _fresh_best_fit_key(pool: PoolState, cls: TaskClass) -> np.ndarray:
    """Spec 5.1's composite key, computed from scratch (what the pool's cached key must equal)."""
    exist = pool.hp_gpus if cls is TaskClass.HP else pool.spot_gpus
    n = len(pool.node_cap)
    score = (pool.free + 1) * 100 - exist
    e = 10000 - pool.eviction_score if cls is TaskClass.SPOT else pool.eviction_score
    return score * (10001 * n) + e * n + np.arange(n)


@given(
    NODE_SIZES,
    st.lists(FRACTIONAL_TASK, min_size=2, max_size=16),
    st.lists(st.integers(min_value=0, max_value=15), max_size=6),
    st.booleans(),
)
def test_cached_best_fit_key_tracks_every_change(
    sizes: list[int], tasks: list[tuple[TaskClass, float, int, float]], removals: list[int], rescore: bool
) -> None:
    pool = a_pool(*sizes)
    for cls in (TaskClass.HP, TaskClass.SPOT):
        pool.best_fit_key(cls)  # build the caches first, so every later change must update them
    _fill(pool, tasks[: len(tasks) // 2])
    pool.begin()  # a pass's tentative changes and their rollback go through the same updates
    _fill(pool, tasks[len(tasks) // 2 :])
    pool.rollback()
    if rescore:
        pool.eviction_score = np.arange(len(sizes), dtype=np.int64) * 997 % 9900
    running = sorted(pool.running)
    for i in removals:
        if running:
            pool.remove_task(running.pop(i % len(running)))
    for cls in (TaskClass.HP, TaskClass.SPOT):
        assert (pool.best_fit_key(cls) == _fresh_best_fit_key(pool, cls)).all()


@given(NODE_SIZES, st.lists(FRACTIONAL_TASK, min_size=1, max_size=16), st.lists(st.booleans(), max_size=16))
def test_release_all_equals_removing_one_by_one(
    sizes: list[int], tasks: list[tuple[TaskClass, float, int, float]], keep_mask: list[bool]
) -> None:
    bulk, single = a_pool(*sizes), a_pool(*sizes)
    _fill(bulk, tasks)
    _fill(single, tasks)
    before = set(bulk.running)
    keep = frozenset(t for t, k in zip(sorted(before), keep_mask, strict=False) if k)
    released = bulk.release_all(keep=keep)
    for tid in sorted(single.running):
        if tid not in keep:
            single.remove_task(tid)
    assert sorted(r.spec.task_id for r in released) == sorted(before - keep)
    assert set(bulk.running) == set(keep)
    assert {r.spec.task_id for r in released}.isdisjoint(keep)
    for name in ("free", "hp_gpus", "spot_gpus", "shared_on_node", "gpu_shared"):
        assert (getattr(bulk, name) == getattr(single, name)).all(), name
    assert np.allclose(bulk.gpu_hp, single.gpu_hp) and np.allclose(bulk.gpu_spot, single.gpu_spot)
    assert bulk.spot_whole == single.spot_whole
    assert bulk.slot_tasks.keys() == single.slot_tasks.keys()
    assert abs(bulk.spot_in_use - single.spot_in_use) < 1e-9 and abs(bulk.hp_in_use - single.hp_in_use) < 1e-9
    for cls in (TaskClass.HP, TaskClass.SPOT):
        assert (bulk.best_fit_key(cls) == _fresh_best_fit_key(bulk, cls)).all()
