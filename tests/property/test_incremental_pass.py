"""Differential: passes that read the queue's gang index decide exactly what scanning passes decide.

Two runtimes see the same seeded random sequence of driver calls (submits of mixed shapes, passes
with and without preemption and quota, finishes, cancels, guarantee ticks, nodes down and up,
quota changes, the eviction cap, lease renewals, waits that make reservations due). One reads the
index (the default: the queue's gang list finds the reservation's holder); the other has `indexed`
off and scans the whole HP queue as before issue 23. After every call both must have returned the
same outcomes and hold the same running tasks, queues and reservation. Every policy, 40 scenarios
each.

Why not against a pass that ignores the memos: that is not today's behaviour. A bucket's memo
survives evictions made earlier in the same pass (they do not change the capacity version), so a
spot head held by the quota is not retried when an HP start evicts spot and lowers S_v; a
memo-less re-scan would start it (docs/decisions.md, issue 23 item 4).
"""

from __future__ import annotations

import random

import pytest
from builders import a_pool, a_task

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings
from gfs.services.core.task import TaskClass

POLICIES = ["gfs", "fifo", "k8s-priority", "lyra", "fgd", "chronus", "gfs-no-reservation"]
SHAPES = (0.25, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 8.0)


def _pair(policy: str, nodes: tuple[int, ...]) -> tuple[PoolRuntime, PoolRuntime]:
    incremental = PoolRuntime(a_pool(*nodes), build_policy(policy), RuntimeSettings())
    scanning = PoolRuntime(a_pool(*nodes), build_policy(policy), RuntimeSettings())
    scanning.indexed = False
    assert incremental.indexed and not scanning.indexed  # two paths, not one twice
    return incremental, scanning


def _view(rt: PoolRuntime) -> tuple[object, ...]:
    return (
        sorted((tid, r.placements) for tid, r in rt.state.running.items()),
        [tid for _, entries in rt.hp.buckets() for _, tid in entries],
        [tid for _, entries in rt.spot.buckets() for _, tid in entries],
        rt.reservation,
    )


def _scenario(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    nodes = tuple(rng.choice((1, 2, 4, 8, 8)) for _ in range(rng.randint(2, 6)))
    a, b = _pair(policy, nodes)
    now = 0.0
    n = 0
    flags = (True, True)
    for _ in range(rng.randint(40, 160)):
        r = rng.random()
        if r < 0.40:
            n += 1
            cls = TaskClass.HP if rng.random() < 0.4 else TaskClass.SPOT
            g = rng.choice(SHAPES)
            spec = a_task(
                f"{'h' if cls is TaskClass.HP else 's'}{n:04d}",
                cls=cls,
                gpus=g,
                workers=rng.choice((1, 1, 2, 3)) if g >= 1 else rng.choice((1, 2)),
                submit=now,
                guarantee_hours=rng.randint(1, 3),
            )
            assert a.submit(spec, now) == b.submit(spec, now)
        elif r < 0.65:
            pre = rng.random() < 0.9
            quota = rng.random() < 0.9
            if (pre, quota) != flags:  # as both drivers do: switches retry every memo
                flags = (pre, quota)
                a.invalidate()
                b.invalidate()
            got = a.schedule(now, preemption_enabled=pre, quota_enabled=quota).outcomes
            want = b.schedule(now, preemption_enabled=pre, quota_enabled=quota).outcomes
            assert got == want, f"{policy} seed {seed} pass at {now}"
        elif r < 0.73 and a.state.running:
            tid = rng.choice(sorted(a.state.running))
            assert a.finish(tid, now) == b.finish(tid, now)
        elif r < 0.76 and a.tasks:
            tid = rng.choice(sorted(a.tasks))
            assert a.cancel(tid, now) == b.cancel(tid, now)
        elif r < 0.80 and a.state.running:
            tid = rng.choice(sorted(a.state.running))
            assert a.period_tick(tid, now) == b.period_tick(tid, now)
        elif r < 0.83:
            node = rng.randrange(len(nodes))
            if rng.random() < 0.5:
                assert a.node_down(node, now) == b.node_down(node, now)
            else:
                assert a.node_up(node, now) == b.node_up(node, now)
        elif r < 0.88:
            cap = float(rng.choice((0, 2, 4, 8, 16, 64)))
            quota = {h: cap * (1 + 0.5 * (h - 1)) for h in a.quota}
            assert a.update_quota(quota, 1.0) == b.update_quota(quota, 1.0)
        elif r < 0.90:
            limit = rng.choice((None, 0, 1, 3))
            a.set_eviction_cap(limit, 3600.0)
            b.set_eviction_cap(limit, 3600.0)
        elif r < 0.92 and policy.startswith("chronus"):
            assert a.release_leases(now) == b.release_leases(now)
        else:
            now += rng.choice((1.0, 60.0, 600.0, 3600.0, 4 * 3600.0))
        assert _view(a) == _view(b), f"{policy} seed {seed} at {now}"


@pytest.mark.parametrize("policy", POLICIES)
def test_indexed_passes_decide_as_scanning_passes(policy: str) -> None:
    for seed in range(40):
        _scenario(policy, seed)
