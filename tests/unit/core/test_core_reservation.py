"""Head-of-queue reservations (issue 21, core/reservation.py): a wide HP gang is not starved by
smaller HP tasks backfilling past it. Worked by hand on three 8-GPU nodes n0, n1, n2.

At t = 0: HP A (4 GPUs) runs on n0 until 4000, HP B (6 GPUs) on n1 for ever, HP S1 (4 GPUs) on
n0 until 5000; n2 is idle. Gang G = 2 workers x 8 GPUs is queued at 0: it needs two nodes with 8
GPUs HP does not hold and only n2 has them. At 4000 A finishes and HP S2 (4 GPUs) and spot P
(4 GPUs) arrive.

Without a reservation (gfs-no-reservation): S2 takes n0's 4 free GPUs (best fit: n1 has 2 free,
n2 8). At 5000 S1 finishes, but S2 still holds n0: G cannot start; backfill can repeat this for
ever.

With the reservation (gfs, reserve after 3600 s): at 4000 G has waited 4000 s >= 3600, so it gets
the nodes with the most GPUs HP does not hold: n2 (8), then n0 (8 - S1's 4 = 4); n1 has 2.
G is tried first and does not fit; n0's and n2's idle GPUs are held, so S2 (4 GPUs) finds only
n1's 2 free GPUs and waits, and spot P, which would fit only on held GPUs, waits as RESERVED.
At 5000 S1 finishes: n0 and n2 are empty and G starts on them.
"""

from __future__ import annotations

from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Started


def _world(policy: str) -> PoolRuntime:
    rt = PoolRuntime(a_pool(8, 8, 8), build_policy(policy), RuntimeSettings())
    for spec in (a_task("A", gpus=4), a_task("B", gpus=6), a_task("S1", gpus=4)):
        assert rt.submit(spec, 0.0) is None
    started = {o.task_id: o for o in rt.schedule(0.0).outcomes if isinstance(o, Started)}
    assert set(started) == {"A", "B", "S1"}
    # Best fit: B (6) alone on a node, A and S1 share one; which node is which is the placement's
    # business, so the test names nodes by what runs there.
    return rt


def _node_of(rt: PoolRuntime, task: str) -> int:
    return rt.state.running[TaskId(task)].placements[0].node


def _after_a_finishes(rt: PoolRuntime) -> list[str]:
    assert rt.submit(a_task("G", gpus=8, workers=2), 0.0) is None
    assert rt.schedule(0.0).outcomes == ()  # G cannot fit: only one node has 8 non-HP GPUs
    rt.finish(TaskId("A"), 4000.0)
    assert rt.submit(a_task("S2", gpus=4, submit=4000.0), 4000.0) is None
    assert rt.submit(a_spot("P", gpus=4, submit=4000.0), 4000.0) is None
    return [o.task_id for o in rt.schedule(4000.0).outcomes if isinstance(o, Started)]


def test_without_a_reservation_backfill_starves_the_gang() -> None:
    rt = _world("gfs-no-reservation")
    shared = _node_of(rt, "S1")
    started = _after_a_finishes(rt)
    assert "S2" in started and _node_of(rt, "S2") == shared
    rt.finish(TaskId("S1"), 5000.0)
    assert TaskId("G") not in {o.task_id for o in rt.schedule(5000.0).outcomes}


def test_the_reservation_holds_its_nodes_until_the_gang_starts() -> None:
    # Issue 21's rule (gfs-hold-reserved): nothing else on the reserved nodes. gfs lends their idle
    # GPUs to spot only while the holder cannot start within the period (test_core_spot_room.py).
    rt = _world("gfs-hold-reserved")
    shared, busy = _node_of(rt, "S1"), _node_of(rt, "B")
    (idle,) = {0, 1, 2} - {shared, busy}
    started = _after_a_finishes(rt)
    assert started == []  # neither S2 nor P may use the reserved nodes; G does not fit yet
    res = rt.reservation
    assert res is not None and res.task_id == "G" and set(res.nodes) == {shared, idle}
    assert rt.spot_head_reason() is Unschedulable.RESERVED
    rt.finish(TaskId("S1"), 5000.0)
    outcomes = rt.schedule(5000.0).outcomes
    (g,) = [o for o in outcomes if isinstance(o, Started) and o.task_id == "G"]
    assert {p.node for p in g.placements} == {shared, idle}
    assert rt.reservation is None  # released: the nodes are everyone's again


def test_no_reservation_before_the_threshold() -> None:
    rt = _world("gfs")
    assert rt.submit(a_task("G", gpus=8, workers=2), 0.0) is None
    rt.schedule(0.0)
    rt.finish(TaskId("A"), 3000.0)  # G has waited 3000 s < 3600 s
    assert rt.submit(a_task("S2", gpus=4, submit=3000.0), 3000.0) is None
    rt.schedule(3000.0)
    assert rt.reservation is None and TaskId("S2") in rt.state.running


def test_backfill_goes_past_the_holder_in_its_own_bucket() -> None:
    """EASY backfill inside the holder's bucket. Four 8-GPU nodes: HP X (4 GPUs) on n0, Y (4) on
    n1, Z (8) on n2, n3 idle. Gang G = 3 x 8 GPUs queued at 0; T = 1 x 8 GPUs at 100, in G's
    bucket (same GPUs per worker) behind it. Without a reservation the bucket's failing head G
    blocks T (spec 5.3), though T fits on n3. At 4000 G holds a reservation on the three nodes
    with the most non-HP GPUs: n3 (8), n0 (4), n1 (4). At 5000 Z ends: n2 is free, G still needs
    three free nodes (n2, n3; n0 and n1 have 4 each) and does not start; T starts on n2, outside
    the reservation, instead of waiting behind G."""
    rt = PoolRuntime(a_pool(8, 8, 8, 8), build_policy("gfs"), RuntimeSettings(device_indices=False))
    for name, gpus, node in (("X", 4, 0), ("Y", 4, 1), ("Z", 8, 2)):
        spec = a_task(name, gpus=gpus)
        rt.tasks[spec.task_id] = spec
        run_on(rt.state, spec, (node, gpus))
    assert rt.submit(a_task("G", gpus=8, workers=3), 0.0) is None
    assert rt.submit(a_task("T", gpus=8, submit=100.0), 100.0) is None
    assert rt.schedule(100.0).outcomes == ()  # T is blocked behind G in their bucket
    assert rt.schedule(4000.0).outcomes == ()
    assert rt.reservation is not None and set(rt.reservation.nodes) == {0, 1, 3}
    rt.finish(TaskId("Z"), 5000.0)
    (t,) = rt.schedule(5000.0).outcomes
    assert isinstance(t, Started) and t.task_id == "T" and [p.node for p in t.placements] == [2]
