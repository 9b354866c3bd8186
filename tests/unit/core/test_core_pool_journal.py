"""A pass's journal (core/pool_journal.py) and its holds (core/placeholders.py): both must leave
the pool exactly as the node-by-node path does, and the rollback exactly as it was."""

from __future__ import annotations

import numpy as np
import pytest
from builders import HP, SPOT, a_pool, a_spot, a_task, run_on

from gfs.services.core.placeholders import hold, lift
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskClass


def _arrays(pool: PoolState) -> dict[str, object]:
    return {
        "free": pool.free.tolist(),
        "hp": pool.hp_gpus.tolist(),
        "spot": pool.spot_gpus.tolist(),
        "keys": {c: k.tolist() for c, k in pool.fit.keys.items()},
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


def test_a_hold_is_accounted_as_hp_tasks_node_by_node_and_rolled_back() -> None:
    nodes = list(range(12))
    stepwise, held = a_pool(*[8] * 12), a_pool(*[8] * 12)
    for pool in (stepwise, held):
        run_on(pool, a_spot("s", gpus=3), (2, 3))
        pool.best_fit_key(TaskClass.HP)  # the cached keys must follow the change too
        pool.best_fit_key(TaskClass.SPOT)
    gpus = np.array([1 + n % 3 if n != 2 else 5 for n in nodes])
    stepwise.begin()
    for n in nodes:  # one HP placeholder task per node, as before holds existed
        run_on(stepwise, a_task(f"w{n}", gpus=int(gpus[n]), tenant="reservation"), (n, int(gpus[n])))
    before = _arrays(held)
    held.begin()
    assert hold(held, "r", "reservation", gpus)
    a, b = _arrays(stepwise), _arrays(held)
    for field in ("free", "hp", "spot", "keys", "hp_in_use", "tenants"):
        assert a[field] == b[field], field
    assert np.array_equal(held.best_fit_key(HP), a_fresh_key(held, HP))
    lift(held, "r")
    lift(held, "r")  # not held any more: nothing to do
    assert hold(held, "r", "reservation", gpus)
    held.rollback()
    assert _arrays(held) == before
    assert held.holds == {}
    assert np.array_equal(held.best_fit_key(SPOT), a_fresh_key(held, SPOT))
    assert not hold(held, "none", "reservation", np.zeros(12, dtype=np.int64)) and held.holds == {}


def test_holds_exist_inside_a_pass_only() -> None:
    pool = a_pool(8, 8)
    with pytest.raises(RuntimeError):
        hold(pool, "r", "reservation", np.array([1, 0]))


def a_fresh_key(pool: PoolState, cls: TaskClass) -> np.ndarray:
    """The best-fit key computed from scratch (the cache dropped)."""
    cached = dict(pool.fit.keys)
    pool.fit.keys.clear()
    try:
        return pool.best_fit_key(cls).copy()
    finally:
        pool.fit.keys.update(cached)
