"""A pass's journal (core/pool_journal.py) and the one-step accounting of wide placements
(`PoolState._take_spread`): both must leave the pool exactly as the node-by-node path does."""

from __future__ import annotations

import numpy as np
from builders import HP, SPOT, a_pool, a_spot, a_task, run_on

from services.core.decisions import WorkerPlacement
from services.core.pool import PoolState, RunningTask
from services.core.task import TaskClass


def _arrays(pool: PoolState) -> dict[str, object]:
    return {
        "free": pool.free.tolist(),
        "hp": pool.hp_gpus.tolist(),
        "spot": pool.spot_gpus.tolist(),
        "keys": {c: k.tolist() for c, k in pool._fit_keys.items()},
        "hp_in_use": pool.hp_in_use,
        "tenants": dict(pool.hp_by_tenant),
        "running": list(pool.running),
    }


def test_a_rolled_back_pass_that_only_added_gives_back_its_mutation_count() -> None:
    pool = run_on(a_pool(8, 8, 8), a_task("h0", gpus=2), (0, 2))
    before = pool.mutations
    pool.begin()
    run_on(pool, a_task("h1", gpus=4), (1, 4))
    assert pool.mutations != before
    pool.rollback()
    assert pool.mutations == before  # the memos of the state before the pass still hold


def test_a_pass_that_removed_an_earlier_task_counts_as_a_change_never_seen_before() -> None:
    pool = run_on(run_on(a_pool(8, 8), a_spot("s0", gpus=2), (0, 2)), a_spot("s1", gpus=2), (1, 2))
    seen = {pool.mutations}
    before = pool.mutations
    pool.begin()
    pool.remove_task(a_spot("s0").task_id)  # a tentative eviction
    seen.add(pool.mutations)
    pool.rollback()
    # The same allocation, but s0 now comes after s1 in the pool's dicts: not the state of `before`.
    assert list(pool.running) == ["s1", "s0"]
    assert pool.mutations not in seen


def test_a_removal_of_a_task_the_pass_added_keeps_the_order() -> None:
    pool = a_pool(8, 8)
    before = pool.mutations
    pool.begin()
    run_on(pool, a_task("hold", gpus=4), (0, 4))
    pool.remove_task(a_task("hold").task_id)  # a hold lifted for one placement
    run_on(pool, a_task("hold", gpus=4), (0, 4))
    pool.rollback()
    assert pool.mutations == before


def test_wide_hp_placements_are_accounted_as_node_by_node() -> None:
    nodes = list(range(12))
    stepwise, spread = a_pool(*[8] * 12), a_pool(*[8] * 12)
    for pool in (stepwise, spread):
        run_on(pool, a_spot("s", gpus=3), (2, 3))
        pool.best_fit_key(TaskClass.HP)  # the cached keys must follow the change too
        pool.best_fit_key(TaskClass.SPOT)
    wide = a_task("wide", gpus=float(sum(1 + n % 3 for n in nodes)))
    placements = tuple(WorkerPlacement(n, 1 + n % 3) for n in nodes)
    # Node by node: one narrow task per node, as before the one-step path existed.
    for n in nodes:
        run_on(stepwise, a_task(f"w{n}", gpus=1 + n % 3, tenant="org"), (n, 1 + n % 3))
    spread.add_task(RunningTask(wide, 0.0, placements))
    a, b = _arrays(stepwise), _arrays(spread)
    for field in ("free", "hp", "spot", "keys", "hp_in_use", "tenants"):
        assert a[field] == b[field], field
    assert np.array_equal(spread.best_fit_key(HP), a_fresh_key(spread, HP))
    spread.remove_task(wide.task_id)
    assert spread.free.tolist() == [8, 8, 5, *[8] * 9]
    assert np.array_equal(spread.best_fit_key(SPOT), a_fresh_key(spread, SPOT))


def a_fresh_key(pool: PoolState, cls: TaskClass) -> np.ndarray:
    """The best-fit key computed from scratch (the cache dropped)."""
    cached = dict(pool._fit_keys)
    pool._fit_keys.clear()
    try:
        return pool.best_fit_key(cls).copy()
    finally:
        pool._fit_keys.update(cached)
