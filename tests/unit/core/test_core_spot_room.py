"""Where spot may go while HP work waits (issue 35, core/cycle.py's spot room), worked by hand.

1. Lending: a reservation's idle GPUs serve spot while its holder cannot start within the period;
   the holder, tried first on every pass, evicts that spot when it can start. Lent spot goes to
   the reserved nodes first, so the other nodes' idle GPUs stay free for arriving HP.
2. Claims: GPUs the servable HP queue is expected to take within the period (core/servable.py)
   are kept from spot ("hard", gfs), so the HP task later starts there without an eviction.
"""

from __future__ import annotations

from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Started, Stopped


def _started(outcomes: tuple[object, ...]) -> set[str]:
    return {o.task_id for o in outcomes if isinstance(o, Started)}


def _reserved_world(policy: str) -> PoolRuntime:
    """Three 8-GPU nodes: HP A (4) and S1 (4) share one, HP B (6) has one, one is idle; gang G
    (2 x 8 GPUs) is queued at 0 and fits only where two nodes have 8 GPUs HP does not hold."""
    rt = PoolRuntime(a_pool(8, 8, 8), build_policy(policy), RuntimeSettings())
    for spec in (a_task("A", gpus=4), a_task("B", gpus=6), a_task("S1", gpus=4)):
        assert rt.submit(spec, 0.0) is None
    assert _started(rt.schedule(0.0).outcomes) == {"A", "B", "S1"}
    assert rt.submit(a_task("G", gpus=8, workers=2), 0.0) is None
    assert rt.schedule(0.0).outcomes == ()
    return rt


def _node_of(rt: PoolRuntime, task: str) -> int:
    return rt.state.running[TaskId(task)].placements[0].node


def test_spot_borrows_the_reserved_gpus_and_the_holder_evicts_it() -> None:
    """At 4000 A ends (4 GPUs freed) and G, waiting since 0 (>= 3600 s), reserves the nodes with
    the most GPUs HP does not hold: the shared node (8 - S1's 4) and the idle one. At 8000 A's
    release is more than a period old and S1 (4 GPUs) still holds the shared node: G cannot start
    within the period, so spot P (4 GPUs), which fits nowhere else (B's node has 2 free), borrows
    the shared node's 4 idle GPUs (best fit there). At 9000 S1 ends; G, tried first, starts on its
    nodes by evicting P."""
    rt = _reserved_world("gfs")
    shared = _node_of(rt, "S1")
    rt.finish(TaskId("A"), 4000.0)
    assert rt.schedule(4000.0).outcomes == ()
    assert rt.reservation is not None and shared in rt.reservation.nodes
    assert rt.submit(a_spot("P", gpus=4, submit=8000.0), 8000.0) is None
    assert _started(rt.schedule(8000.0).outcomes) == {"P"}
    assert _node_of(rt, "P") == shared
    rt.finish(TaskId("S1"), 9000.0)
    outcomes = rt.schedule(9000.0).outcomes
    (evicted,) = [o for o in outcomes if isinstance(o, Stopped)]
    assert evicted.task_id == "P" and evicted.preemptor == "G"
    assert "G" in _started(outcomes) and set(rt.reservation.nodes if rt.reservation else ()) == set()


def test_lent_spot_goes_to_the_reserved_nodes_first_and_keeps_the_rest_for_hp() -> None:
    """gfs (`lend_first`): at 8000 G's nodes are lent; spot P (2 GPUs) fits both on B's node (2
    free, outside the reservation: the best fit of the whole pool) and on the reserved nodes. It
    goes to the reserved ones (best fit there: the shared node's 4), so B's node keeps its 2 GPUs
    for HP. HP H (2 GPUs) arriving next starts there at once, without an eviction.
    gfs-outside-first: P takes B's node; H then finds no 2 GPUs outside the reservation free and
    evicts P (the holder's nodes are not HP's while G waits)."""
    for policy, p_node, evicts in (("gfs", "shared", False), ("gfs-outside-first", "b", True)):
        rt = _reserved_world(policy)
        nodes = {"shared": _node_of(rt, "S1"), "b": _node_of(rt, "B")}
        rt.finish(TaskId("A"), 4000.0)
        rt.schedule(4000.0)
        assert rt.submit(a_spot("P", gpus=2, submit=8000.0), 8000.0) is None
        assert _started(rt.schedule(8000.0).outcomes) == {"P"}
        assert _node_of(rt, "P") == nodes[p_node], policy
        assert rt.submit(a_task("H", gpus=2, submit=8100.0), 8100.0) is None
        outcomes = rt.schedule(8100.0).outcomes
        assert "H" in _started(outcomes), policy
        assert any(isinstance(o, Stopped) and o.task_id == "P" for o in outcomes) is evicts, policy


def test_no_lending_while_the_holder_can_start_within_the_period() -> None:
    """At 4000 A's 4 GPUs were freed this period and S1 (4) is all the HP on G's nodes: G may start
    within the period, so its nodes are not lent: P waits (it fits only on the held GPUs)."""
    rt = _reserved_world("gfs")
    rt.finish(TaskId("A"), 4000.0)
    assert rt.submit(a_spot("P", gpus=4, submit=4000.0), 4000.0) is None
    assert _started(rt.schedule(4000.0).outcomes) == set()
    assert rt.spot_head_reason() is Unschedulable.RESERVED


def test_without_lending_the_reserved_gpus_stay_idle() -> None:
    """gfs-hold-reserved (issue 21's rule): the same P waits at 8000 though G cannot start."""
    rt = _reserved_world("gfs-hold-reserved")
    rt.finish(TaskId("A"), 4000.0)
    rt.schedule(4000.0)
    assert rt.submit(a_spot("P", gpus=4, submit=8000.0), 8000.0) is None
    assert _started(rt.schedule(8000.0).outcomes) == set()
    assert rt.spot_head_reason() is Unschedulable.RESERVED


def _claims_world(policy: str) -> PoolRuntime:
    """Three 8-GPU nodes: HP X (6) on n0, Y (8) on n1, Z (8) on n2; gang Q (2 x 8) queued at 0.
    At 100 Y ends: n1 is free, Q still needs a second free node. Y's 8 GPUs are this period's
    release, so Q can start within the period on n1 plus what frees next: it is servable and claims
    n1. Spot P (4 GPUs) arrives at 100."""
    rt = PoolRuntime(a_pool(8, 8, 8), build_policy(policy), RuntimeSettings(device_indices=False))
    for name, gpus, node in (("X", 6, 0), ("Y", 8, 1), ("Z", 8, 2)):
        spec = a_task(name, gpus=gpus)
        rt.tasks[spec.task_id] = spec
        run_on(rt.state, spec, (node, gpus))
    assert rt.submit(a_task("Q", gpus=8, workers=2), 0.0) is None
    assert rt.schedule(0.0).outcomes == ()
    rt.finish(TaskId("Y"), 100.0)
    assert rt.submit(a_spot("P", gpus=4, submit=100.0), 100.0) is None
    return rt


def test_hard_claims_keep_spot_off_the_gpus_queued_hp_will_take() -> None:
    """gfs: P fits only on n1, which Q claims: P waits (CLAIMED). At 200 Z ends and Q starts on
    n1 and n2 with no eviction."""
    rt = _claims_world("gfs")
    assert _started(rt.schedule(100.0).outcomes) == set()
    assert rt.spot_head_reason() is Unschedulable.CLAIMED
    rt.finish(TaskId("Z"), 200.0)
    outcomes = rt.schedule(200.0).outcomes
    assert "Q" in _started(outcomes) and not [o for o in outcomes if isinstance(o, Stopped)]


def test_without_claims_spot_takes_them_and_is_evicted() -> None:
    """gfs-claims-off: P starts on n1 at 100; at 200 Q evicts it."""
    rt = _claims_world("gfs-claims-off")
    assert _started(rt.schedule(100.0).outcomes) == {"P"}
    rt.finish(TaskId("Z"), 200.0)
    outcomes = rt.schedule(200.0).outcomes
    assert [(o.task_id, o.preemptor) for o in outcomes if isinstance(o, Stopped)] == [("P", "Q")]


def test_soft_claims_give_way_when_nothing_else_fits() -> None:
    """gfs-claims-soft: P fits nowhere unclaimed, so it takes the claimed GPUs after all."""
    rt = _claims_world("gfs-claims-soft")
    assert _started(rt.schedule(100.0).outcomes) == {"P"}
