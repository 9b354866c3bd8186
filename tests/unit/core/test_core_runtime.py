"""The per-pool runtime (services/core/runtime.py): explanations worked out by hand, queue reasons,
node down/up, cancel, feasibility and device indices on small pools."""

from __future__ import annotations

import pytest
from builders import a_pool, a_spot, a_task

from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.reasons import EvictionReason, Rejection, Unschedulable
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Started, Stopped
from gfs.services.core.task import TaskSpec

T_WIN = 31 * 86400.0


def _runtime(*gpus: int, policy: str = "gfs") -> PoolRuntime:
    return PoolRuntime(a_pool(*gpus), build_policy(policy), RuntimeSettings(t_win_s=T_WIN, cost_weight=5.0))


def _submit(rt: PoolRuntime, spec: TaskSpec) -> None:
    assert rt.submit(spec, spec.submit_s) is None


def _preempted_world() -> PoolRuntime:
    """Two 2-GPU nodes. Spot A (2 GPUs) starts on n0 at 0 (best fit ties break on the node index),
    spot B (2 GPUs) on n1 at 1000. HP H (2 GPUs) arrives at 2000: nothing is free, both nodes
    have 2 preemptible GPUs (the least that fits), so GFS prices both:
      rate term = (F + 1) / (F + S + 1) = 1 with no period logged yet (F = S = 0), on both;
      lost term = 5 * c / (C * T_win), c = 2 GPUs x run time: A 2 x 2000 = 4000, B 2 x 1000 = 2000,
      C = 4, T_win = 31 days -> A 20000 / 10713600, B 10000 / 10713600.
    n1 (victim B) is cheaper: H evicts B and starts on n1; n0 is the losing candidate."""
    rt = _runtime(2, 2)
    _submit(rt, a_spot("A", gpus=2, submit=0.0))
    assert [o.task_id for o in rt.schedule(0.0).outcomes] == ["A"]
    _submit(rt, a_spot("B", gpus=2, submit=1000.0))
    assert [o.task_id for o in rt.schedule(1000.0).outcomes] == ["B"]
    _submit(rt, a_task("H", gpus=2, submit=2000.0))
    return rt


def test_explain_names_the_winner_a_losing_candidate_with_its_cost_and_the_victims() -> None:
    rt = _preempted_world()
    result = rt.schedule(2000.0)
    evicted, started = result.outcomes
    assert isinstance(evicted, Stopped) and evicted.task_id == "B" and evicted.preemptor == "H"
    assert isinstance(started, Started) and started.task_id == "H" and started.preempted
    assert rt.state.node_names[started.placements[0].node] == "n1"

    why = rt.explain(TaskId("H"))
    assert why.state == "running"
    (record,) = why.preemptions
    assert record.winner.node == "n1" and record.winner.victims == ("B",)
    assert record.winner.eviction_rate_term == pytest.approx(1.0)
    assert record.winner.lost_gpu_term == pytest.approx(5 * 2000.0 / (4 * T_WIN))
    assert record.winner.cost == pytest.approx(1.0 + 10000.0 / 10713600.0)
    assert record.considered == 2
    (loser,) = record.losers
    assert loser.node == "n0" and loser.victims == ("A",)
    assert loser.eviction_rate_term == pytest.approx(1.0)
    assert loser.lost_gpu_term == pytest.approx(20000.0 / 10713600.0)
    assert loser.cost > record.winner.cost

    victim = rt.explain(TaskId("B"))
    assert victim.state == "queued"
    assert victim.last_eviction is not None
    assert victim.last_eviction.preemptor == "H" and victim.last_eviction.node == "n1"
    assert victim.last_eviction.reason is EvictionReason.PREEMPTED_BY_HP
    assert victim.last_eviction.preemption is not None
    assert victim.last_eviction.preemption.winner.node == "n1"
    # B went back to the queue after the pass that evicted it: no pass has looked at it yet.
    assert victim.queued is not None and victim.queued.reason is Unschedulable.NOT_YET_CONSIDERED
    assert "n1" in victim.message() and "H" in victim.message()


def test_queued_reasons_no_fit_head_of_line_threshold() -> None:
    rt = _preempted_world()
    rt.schedule(2000.0)
    rt.schedule(2000.0)  # B is tried again: n0 holds A, n1 holds H
    b = rt.explain(TaskId("B")).queued
    assert b is not None and b.reason is Unschedulable.NO_FIT
    # S3 joins B's bucket (2 GPUs, 1 hour) behind B; S6 asks 2 GPUs for 2 hours: its own bucket,
    # skipped because 2 GPUs already failed in this pass (the `failed` threshold).
    _submit(rt, a_spot("S3", gpus=2, submit=2100.0))
    _submit(rt, a_spot("S6", gpus=2, submit=2100.0, guarantee_hours=2))
    # Before any pass: S6's bucket has not been looked at; S3 is already behind the blocked B (the
    # bucket's memo holds until GPUs are freed, so the next pass will not try S3 either).
    assert rt.explain(TaskId("S6")).queued.reason is Unschedulable.NOT_YET_CONSIDERED  # type: ignore[union-attr]
    assert rt.explain(TaskId("S3")).queued.reason is Unschedulable.HEAD_OF_LINE  # type: ignore[union-attr]
    rt.schedule(2100.0)
    s3 = rt.explain(TaskId("S3")).queued
    assert s3 is not None and s3.reason is Unschedulable.HEAD_OF_LINE and s3.blocked_by == "B"
    s6 = rt.explain(TaskId("S6")).queued
    assert s6 is not None and s6.reason is Unschedulable.THRESHOLD


def test_queued_reasons_over_quota_and_no_preemption_plan() -> None:
    rt = _preempted_world()
    rt.schedule(2000.0)
    # Quota 2 GPUs: A already holds 2, so B (2 more) is over quota whatever the placement.
    assert rt.update_quota(dict.fromkeys(range(1, 5), 2.0), 1.0)
    rt.schedule(2000.0)
    b = rt.explain(TaskId("B")).queued
    assert b is not None and b.reason is Unschedulable.OVER_QUOTA
    # An HP gang of 2 x 2 GPUs: n1 is all HP, so only n0 can be freed: no preemption plan.
    _submit(rt, a_task("G", gpus=2, workers=2, submit=2000.0))
    rt.schedule(2000.0)
    g = rt.explain(TaskId("G")).queued
    assert g is not None and g.reason is Unschedulable.NO_PREEMPTION_PLAN


def test_node_down_requeues_its_tasks_voids_the_open_period_and_offers_nothing() -> None:
    rt = _runtime(4, 4)
    _submit(rt, a_task("H", gpus=2))
    _submit(rt, a_spot("S", gpus=2, duration=20000.0))
    _submit(rt, a_spot("T", gpus=4, duration=20000.0))
    started = {o.task_id: o for o in rt.schedule(0.0).outcomes if isinstance(o, Started)}
    node_of = {tid: o.placements[0].node for tid, o in started.items()}
    assert node_of["H"] == node_of["S"] != node_of["T"]
    down = node_of["H"]
    assert rt.period_tick(TaskId("S"), 3600.0)  # one period of S succeeded
    stops = rt.node_down(down, 5000.0)
    assert sorted(s.task_id for s in stops) == ["H", "S"]
    assert all(s.reason is EvictionReason.NODE_DOWN and not s.failed_period for s in stops)
    assert rt.ledger.failed_total == 0 and rt.ledger.succeeded_total == 1  # the open period is void
    assert {"H", "S"} <= set(rt.queued_ids()) and "T" in rt.state.running
    assert rt.quota_inputs(5000.0, None).capacity == 4
    # While it is down nothing lands on it, not even by preemption: H preempts T on the other node.
    result = rt.schedule(5000.0)
    for o in result.outcomes:
        placed = o.placements if isinstance(o, Started) else ()
        assert all(p.node != down for p in placed)
        assert not isinstance(o, Stopped) or o.node != down
    assert rt.explain(TaskId("T")).last_eviction.reason is EvictionReason.PREEMPTED_BY_HP  # type: ignore[union-attr]
    assert rt.node_up(down, 6000.0)
    assert rt.quota_inputs(6000.0, None).capacity == 8
    placed = [o for o in rt.schedule(6000.0).outcomes if isinstance(o, Started)]
    assert any(p.node == down for o in placed for p in o.placements)


def test_cancel_queued_and_running() -> None:
    rt = _runtime(2)
    _submit(rt, a_spot("A", gpus=2, duration=20000.0))
    _submit(rt, a_spot("Q", gpus=2))
    rt.schedule(0.0)  # A starts (same bucket and submit time: the task id decides), Q waits
    assert rt.cancel(TaskId("Q"), 10.0) is None and "Q" not in rt.queued_ids()
    stop = rt.cancel(TaskId("A"), 7300.0)  # two full periods done, the third interrupted
    assert stop is not None and stop.reason is EvictionReason.CANCELLED and stop.successes == 2
    assert not stop.failed_period and rt.ledger.failed_total == 0
    assert rt.state.running == {} and int(rt.state.free.sum()) == 2
    with pytest.raises(KeyError):
        rt.cancel(TaskId("A"), 7400.0)


@pytest.mark.parametrize(
    ("gpus", "workers", "reason"),
    [
        (16.0, 1, Rejection.WORKER_LARGER_THAN_NODE),
        (8.0, 3, Rejection.GANG_LARGER_THAN_POOL),
        (0.5, 33, Rejection.GANG_LARGER_THAN_POOL),
        (0.0, 1, Rejection.INVALID_REQUEST),
        (8.0, 2, None),
        (0.5, 32, None),
    ],
)
def test_feasibility_rejections(gpus: float, workers: int, reason: Rejection | None) -> None:
    rt = _runtime(8, 8)
    spec = a_task("J", gpus=gpus, workers=workers)
    assert rt.submit(spec, 0.0) is reason
    assert ("J" in rt.queued_ids()) is (reason is None)


def test_wrong_pool_and_time_going_back_are_refused() -> None:
    rt = _runtime(8)
    assert rt.submit(a_task("J", pool="other"), 0.0) is Rejection.UNKNOWN_POOL
    rt.schedule(100.0)
    with pytest.raises(ValueError, match="time went back"):
        rt.schedule(50.0)


def test_device_indices_whole_and_shared_never_collide() -> None:
    # Whole GPUs first take devices 0 and 1; the pool then opens its first unshared slot (pool
    # slot 0) for a fractional worker, which must map to a device not in use: 2.
    rt = _runtime(4)
    _submit(rt, a_spot("W", gpus=2))
    (w,) = rt.schedule(0.0).outcomes
    assert isinstance(w, Started) and w.devices[0].devices == (0, 1)
    _submit(rt, a_task("F", gpus=0.5, submit=1.0))
    _submit(rt, a_task("G", gpus=0.5, submit=1.0))
    started = [o for o in rt.schedule(1.0).outcomes if isinstance(o, Started)]
    assert [o.devices[0].devices for o in started] == [(2,), (2,)]  # both share the one GPU
    assert {o.devices[0].fraction for o in started} == {0.5}
    rt.finish(TaskId("W"), 10.0)
    assert rt.devices.in_use(0) == frozenset({2})
    rt.finish(TaskId("F"), 11.0)
    assert rt.devices.in_use(0) == frozenset({2})  # G still holds the shared GPU
    rt.finish(TaskId("G"), 12.0)
    assert rt.devices.in_use(0) == frozenset()
    with pytest.raises(KeyError):
        rt.devices.release(TaskId("G"))  # freed exactly once


def test_quota_inputs_tell_quota_held_spot_from_placement_held_spot() -> None:
    # One 8-GPU node. HP h (6 GPUs) runs from 0; HP q (4 GPUs) queues behind it (2 GPUs free).
    # Quota 2: spot s (2 GPUs) fits the 2 free GPUs but 0 + 2 > 2 is false -> s starts. Spot u
    # (2 GPUs) then finds 2 + 2 > 2: over quota (the quota held it, not placement).
    rt = _runtime(8)
    _submit(rt, a_task("h", gpus=6, submit=0.0, duration=10_000.0))
    rt.schedule(0.0)
    _submit(rt, a_task("q", gpus=4, submit=10.0))
    rt.update_quota(dict.fromkeys(range(1, 5), 2.0), 1.0)
    _submit(rt, a_spot("s", gpus=2, submit=20.0))
    _submit(rt, a_spot("u", gpus=2, submit=30.0))
    started = [o.task_id for o in rt.schedule(30.0).outcomes]
    assert started == ["s"]
    inputs = rt.quota_inputs(3630.0, None)
    assert inputs.hp_observed == 6 + 4  # running h plus queued q
    assert inputs.quota_held_wait_s == pytest.approx(3600.0)  # u, queued at 30
    assert inputs.head_wait_s == pytest.approx(3600.0)
    # A quota of 8: u is now held by placement (no GPU free), not by the quota.
    rt.update_quota(dict.fromkeys(range(1, 5), 8.0), 1.0)
    assert rt.schedule(3630.0).outcomes == ()
    later = rt.quota_inputs(7200.0, None)
    assert later.quota_held_wait_s is None
    assert later.head_wait_s == pytest.approx(7170.0)
    # Cancelling the queued HP q takes its 4 GPUs out of the observed demand.
    assert rt.cancel(TaskId("q"), 7300.0) is None
    assert rt.quota_inputs(7300.0, None).hp_observed == 6
