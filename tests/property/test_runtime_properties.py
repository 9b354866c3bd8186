"""Invariants of the per-pool runtime under random sequences of driver calls (every policy).

After every call: GPUs never over-allocated; victims always spot; device indices unique per node,
within its GPU count and freed exactly once; nothing placed on or evicted from a down node; every
task in exactly one place (HP queue, spot queue or running) and the pool's spot/HP totals match
the running tasks; `quota_inputs` equals a from-scratch recomputation from the outcomes the
runtime reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from builders import a_pool, a_task
from hypothesis import given
from hypothesis import strategies as st

from gfs.services.core.guarantee import GUARANTEE_PERIOD_S
from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.reasons import EvictionReason
from gfs.services.core.runtime import Finished, PoolRuntime, RuntimeSettings, Started, Stopped
from gfs.services.core.task import TaskClass

NODES = (4, 2, 8)

submit = st.tuples(
    st.just("submit"),
    st.sampled_from(["HP", "SPOT"]),
    st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    st.integers(1, 2),
    st.integers(1, 2),
)
ops = st.one_of(
    submit,
    submit,
    st.tuples(st.just("schedule"), st.booleans()),
    st.tuples(st.just("schedule"), st.just(True)),
    st.tuples(st.just("finish"), st.integers(0, 20)),
    st.tuples(st.just("cancel"), st.integers(0, 20)),
    st.tuples(st.just("tick"), st.integers(0, 20)),
    st.tuples(st.just("down"), st.integers(0, len(NODES) - 1)),
    st.tuples(st.just("up"), st.integers(0, len(NODES) - 1)),
    st.tuples(st.just("quota"), st.sampled_from([0.0, 3.0, 8.0, 14.0])),
    st.tuples(st.just("lease"), st.just(0)),
    st.tuples(st.just("wait"), st.sampled_from([60.0, 1800.0, 3600.0, 7200.0])),
)


@dataclass
class Reference:
    """What the test saw the runtime report, to recompute the quota inputs from scratch."""

    failures: list[float] = field(default_factory=list)
    successes: list[tuple[float, int]] = field(default_factory=list)
    live: set[TaskId] = field(default_factory=set)
    down: set[int] = field(default_factory=set)
    runs: dict[TaskId, list[float]] = field(default_factory=dict)  # running task -> [start, periods logged]

    def expected_successes(self, tid: TaskId, now: float, *, finished: bool) -> int:
        """Spec 4.2 from first principles: completed periods (at least one on a finish) minus the
        ones already logged by period ticks."""
        start, logged = self.runs.pop(tid)
        periods = (now - start) / GUARANTEE_PERIOD_S
        done = max(1, math.ceil(periods - 1e-9)) if finished else math.floor(periods + 1e-9)
        return max(0, done - int(logged))


def _check_outcomes(
    rt: PoolRuntime, ref: Reference, outcomes: tuple[object, ...] | list[object], now: float
) -> None:
    for o in outcomes:
        if isinstance(o, Stopped):
            expected = ref.expected_successes(o.task_id, now, finished=False)
            assert o.successes == (expected if o.task_class is TaskClass.SPOT else 0)
            in_period = o.run_s - math.floor(o.run_s / GUARANTEE_PERIOD_S + 1e-9) * GUARANTEE_PERIOD_S > 1e-9
            if o.task_class is TaskClass.HP or o.reason in (
                EvictionReason.NODE_DOWN,
                EvictionReason.CANCELLED,
            ):
                assert not o.failed_period
            elif o.reason is EvictionReason.PREEMPTED_BY_HP:
                assert o.failed_period
            else:  # a lease not renewed fails the period it interrupts
                assert o.failed_period == in_period
            if o.reason is EvictionReason.PREEMPTED_BY_HP:
                assert o.task_class is TaskClass.SPOT, "victims are always spot"
                assert o.node not in ref.down, "nothing is evicted from a down node"
            if o.successes:
                ref.successes.append((now, o.successes))
            if o.failed_period:
                ref.failures.append(now)
            if o.reason is EvictionReason.CANCELLED:
                ref.live.discard(o.task_id)
        elif isinstance(o, Started):
            assert all(p.node not in ref.down for p in o.placements), "nothing lands on a down node"
            if not o.renewed:
                ref.runs[o.task_id] = [now, 0]
            else:
                assert o.task_id in ref.runs
        elif isinstance(o, Finished):
            expected = ref.expected_successes(o.task_id, now, finished=True)
            spot = rt_class(rt, o.task_id) is TaskClass.SPOT
            assert o.successes == (expected if spot else 0)
            if o.successes:
                ref.successes.append((now, o.successes))


def rt_class(rt: PoolRuntime, tid: TaskId) -> TaskClass:
    return TaskClass.SPOT if tid.startswith("s") else TaskClass.HP


def _check_state(rt: PoolRuntime, ref: Reference, now: float) -> None:
    st_ = rt.state
    assert (st_.free >= 0).all()
    assert np.array_equal(st_.free + st_.hp_gpus + st_.spot_gpus, st_.online_cap)
    hp_ids, spot_ids, running = set(rt.hp.task_ids()), set(rt.spot.task_ids()), set(st_.running)
    assert not (hp_ids & spot_ids) and not (hp_ids & running) and not (spot_ids & running)
    assert hp_ids | spot_ids | running == ref.live
    spot_total = sum(r.spec.total_gpus for r in st_.running.values() if r.spec.task_class is TaskClass.SPOT)
    hp_total = sum(r.spec.total_gpus for r in st_.running.values() if r.spec.task_class is TaskClass.HP)
    assert abs(st_.spot_in_use - spot_total) < 1e-6 and abs(st_.hp_in_use - hp_total) < 1e-6
    for node in ref.down:
        assert all(p.node != node for r in st_.running.values() for p in r.placements)
    # Devices: one binding set per running task; per node whole GPUs disjoint, one device per open
    # shared GPU, all inside the node's GPU count, and as many in use as the pool counts taken.
    holders = rt.devices.holders()
    assert set(holders) == running
    whole: dict[int, list[int]] = {}
    shared: dict[int, dict[int, int]] = {}
    for bindings in holders.values():
        for b in bindings:
            assert all(0 <= d < NODES[b.node] for d in b.devices)
            if b.slot >= 0:
                assert shared.setdefault(b.node, {}).setdefault(b.slot, b.devices[0]) == b.devices[0]
            else:
                whole.setdefault(b.node, []).extend(b.devices)
    for node in range(len(NODES)):
        w = whole.get(node, [])
        s = list(shared.get(node, {}).values())
        assert len(set(w)) == len(w) and len(set(s)) == len(s) and not set(w) & set(s)
        assert rt.devices.in_use(node) == frozenset(w) | frozenset(s)
        assert len(w) + len(s) == int(st_.online_cap[node] - st_.free[node])
    # Quota inputs from scratch.
    window = rt.policy.quota.settings.feedback_window_s
    inputs = rt.quota_inputs(now, None)
    assert inputs.failed_recent == sum(1 for t in ref.failures if t > now - window)
    assert inputs.succeeded_recent == sum(n for t, n in ref.successes if t > now - window)
    assert inputs.capacity == sum(g for i, g in enumerate(NODES) if i not in ref.down)
    assert inputs.idle_gpus == int(st_.free.sum())
    assert abs(inputs.spot_in_use - spot_total) < 1e-6
    if spot_ids:
        head = rt.spot.head()
        assert head is not None and inputs.head_wait_s == now - rt.spot.entered_s[head]
    else:
        assert inputs.head_wait_s is None
    assert rt.ledger.failed_total == len(ref.failures)


@given(
    policy=st.sampled_from(["gfs", "fifo", "k8s-priority", "lyra", "fgd", "chronus"]),
    steps=st.lists(ops, min_size=1, max_size=40),
)
def test_runtime_invariants(policy: str, steps: list[tuple[object, ...]]) -> None:
    rt = PoolRuntime(a_pool(*NODES), build_policy(policy), RuntimeSettings())
    ref = Reference()
    now = 0.0
    n = 0
    for op in steps:
        kind = op[0]
        outcomes: list[object] = []
        if kind == "submit":
            _, cls, gpus, workers, hours = op
            n += 1
            spec = a_task(
                f"{'s' if cls == 'SPOT' else 'h'}{n:03d}",
                cls=TaskClass(cls),
                gpus=float(gpus),  # type: ignore[arg-type]
                workers=int(workers),  # type: ignore[call-overload]
                submit=now,
                guarantee_hours=int(hours),  # type: ignore[call-overload]
            )
            if rt.submit(spec, now) is None:
                ref.live.add(spec.task_id)
        elif kind == "schedule":
            outcomes.extend(rt.schedule(now, preemption_enabled=bool(op[1])).outcomes)
        elif kind == "finish" and rt.state.running:
            tid = sorted(rt.state.running)[int(op[1]) % len(rt.state.running)]  # type: ignore[call-overload]
            outcomes.append(rt.finish(tid, now))
            ref.live.discard(tid)
        elif kind == "cancel" and ref.live:
            tid = sorted(ref.live)[int(op[1]) % len(ref.live)]  # type: ignore[call-overload]
            stop = rt.cancel(tid, now)
            ref.live.discard(tid)
            outcomes.extend([stop] if stop is not None else [])
        elif kind == "tick" and rt.state.running:
            tid = sorted(rt.state.running)[int(op[1]) % len(rt.state.running)]  # type: ignore[call-overload]
            if rt.state.running[tid].spec.task_class is TaskClass.SPOT and rt.period_tick(tid, now):
                ref.successes.append((now, 1))
                ref.runs[tid][1] += 1
        elif kind == "down":
            node = int(op[1])  # type: ignore[call-overload]
            stops = rt.node_down(node, now)
            assert all(s.task_id in rt.queued_ids() for s in stops), "a down node's tasks are queued"
            assert all(not s.failed_period for s in stops), "a node loss voids the open period"
            outcomes.extend(stops)
            ref.down.add(node)
        elif kind == "up":
            rt.node_up(int(op[1]), now)  # type: ignore[call-overload]
            ref.down.discard(int(op[1]))  # type: ignore[call-overload]
        elif kind == "quota":
            rt.update_quota(dict.fromkeys(range(1, 5), float(op[1])), 1.0)  # type: ignore[arg-type]
        elif kind == "lease":
            rt.release_leases(now)
            outcomes.extend(rt.schedule(now).outcomes)
        elif kind == "wait":
            now += float(op[1])  # type: ignore[arg-type]
        _check_outcomes(rt, ref, outcomes, now)
        _check_state(rt, ref, now)
        now += 1.0
