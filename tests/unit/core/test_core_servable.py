"""The servable HP demand (issue 35, core/servable.py), worked by hand on small pools.

Each case gives the pool (8-GPU nodes unless said), what runs where, the HP queue in the
scheduler's order, a reservation, and the GPU chunks HP finishes freed in the last period; it
expects, per tenant, the GPUs the servable queued tasks take beyond what HP holds now, the GPUs
they claim per node, and whether the reservation's holder can start within the period.
Named mutations each case catches are in its comment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue, LargestFirst
from gfs.services.core.reservation import Reservation
from gfs.services.core.servable import HpReleases, plan_servable, servable_levels, servable_total
from gfs.services.core.task import TaskSpec


@dataclass(frozen=True)
class Case:
    name: str
    nodes: tuple[int, ...]
    running: tuple[tuple[TaskSpec, tuple[tuple[int, int], ...]], ...]  # spec, (node, GPUs) each
    queued: tuple[TaskSpec, ...]  # entered in this order (submit times ascending)
    freed: tuple[float, ...] = ()
    reserved: tuple[str, tuple[int, ...]] | None = None  # holder id, its nodes
    queued_gpus: dict[str, float] = field(default_factory=dict)  # tenant -> GPUs beyond HP's now
    claims: tuple[float, ...] = ()  # per node
    holder_servable: bool = False


def _hp(tid: str, gpus: float, workers: int = 1, tenant: str = "org", submit: float = 0.0) -> TaskSpec:
    return a_task(tid, gpus=gpus, workers=workers, tenant=tenant, submit=submit)


CASES = [
    # Fits on idle GPUs: it takes 4 of n1's 8 idle GPUs.
    Case("idle", (8, 8), ((_hp("a", 8, tenant="A"), ((0, 8),)),), (_hp("b", 4, tenant="B"),),
         queued_gpus={"B": 4.0}, claims=(0, 4)),
    # Fits on spot-held GPUs (preemption frees them at once): n0 holds HP 4 and spot 4.
    Case("spot-held", (8, 8),
         ((_hp("a", 4), ((0, 4),)), (a_spot("s", gpus=4), ((0, 4),)), (_hp("c", 8), ((1, 8),))),
         (_hp("b", 4, tenant="B"),), queued_gpus={"B": 4.0}, claims=(4, 0)),
    # A gang wider than what HP does not hold, nothing freed last period: protects nothing.
    # (Mutation "count every queued GPU" gives B: 16.)
    Case("gang-too-wide", (8, 8, 8), ((_hp("a", 8), ((0, 8),)), (_hp("c", 6), ((1, 6),))),
         (_hp("g", 8, workers=2, tenant="B"),), claims=(0, 0, 0)),
    # The same gang when an 8-GPU HP run ended last period: one worker on the freed chunk (it
    # replaces finishing HP: no growth), one on n2, which counts (8).
    # (Mutation "freed GPUs count as growth" gives B: 16.)
    Case("gang-with-freed", (8, 8, 8), ((_hp("a", 8), ((0, 8),)), (_hp("c", 6), ((1, 6),))),
         (_hp("g", 8, workers=2, tenant="B"),), freed=(8.0,), queued_gpus={"B": 8.0}, claims=(0, 0, 8)),
    # A task that fits on freed GPUs alone adds nothing: HP usage stays level.
    Case("freed-only", (8, 8), ((_hp("a", 8), ((0, 8),)), (_hp("c", 8), ((1, 8),))),
         (_hp("b", 4, tenant="B"),), freed=(4.0,), claims=(0, 0)),
    # Backfill in the scheduler's order: the gang of two 4-GPU workers does not fit on n0's 6, the
    # one-worker 4-GPU task behind it in the same bucket does. (Mutation "a miss blocks the queue"
    # gives nothing.)
    Case("backfill", (8,), ((_hp("a", 2), ((0, 2),)),),
         (_hp("gang", 4, workers=2, tenant="X"), _hp("single", 4, tenant="Y", submit=1.0)),
         queued_gpus={"Y": 4.0}, claims=(4,)),
    # Packing is best fit, as placement is: the 4-GPU task claims n1 (4 free), not n0 (8), which
    # stays whole for wider work. (Mutation "first fit" claims n0.)
    Case("best-fit", (8, 8), ((_hp("a", 4), ((1, 4),)),), (_hp("four", 4, tenant="A"),),
         queued_gpus={"A": 4.0}, claims=(0, 4)),
    # A reservation's nodes offer nothing to other tasks, and its holder (HP 4 still on n1, nothing
    # freed last period) cannot start within the period: nothing counts, nothing is claimed.
    Case("holder-waits", (8, 8, 8), ((_hp("a", 8), ((0, 8),)), (_hp("c", 4), ((1, 4),))),
         (_hp("g", 8, workers=2, tenant="G"), _hp("t", 4, tenant="T", submit=1.0)),
         reserved=("g", (1, 2)), claims=(0, 0, 0)),
    # The same with 4 GPUs freed last period: the HP on the holder's nodes (4) is no more than
    # what frees in a period, so the holder counts its growth (16 - 4) and claims its nodes'
    # non-HP GPUs; t fits on the freed chunk alone (no growth). (Mutation "the holder never
    # counts" gives G: 0.)
    Case("holder-servable", (8, 8, 8), ((_hp("a", 8), ((0, 8),)), (_hp("c", 4), ((1, 4),))),
         (_hp("g", 8, workers=2, tenant="G"), _hp("t", 4, tenant="T", submit=1.0)),
         freed=(4.0,), reserved=("g", (1, 2)), queued_gpus={"G": 12.0}, claims=(0, 4, 8),
         holder_servable=True),
]  # fmt: skip


def _build(case: Case) -> tuple[PoolState, BucketQueue, Reservation | None]:
    pool = a_pool(*case.nodes)
    for spec, placements in case.running:
        run_on(pool, spec, *placements)
    queue = BucketQueue(LargestFirst())
    for spec in case.queued:
        queue.push(spec, spec.submit_s)
    res = None
    if case.reserved is not None:
        holder, nodes = case.reserved
        res = Reservation(TaskId(holder), nodes, 0.0, queue.specs[TaskId(holder)].total_gpus)
    return pool, queue, res


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_servable_plan(case: Case) -> None:
    pool, queue, res = _build(case)
    plan = plan_servable(pool, queue, res, case.freed)
    assert {str(t): v for t, v in plan.queued.items()} == case.queued_gpus
    assert plan.claims.tolist() == [float(c) for c in case.claims]
    assert plan.holder_servable is case.holder_servable


def test_levels_add_the_running_hp_per_tenant() -> None:
    case = CASES[0]  # A runs 8, B's queued 4 fits
    pool, queue, res = _build(case)
    plan = plan_servable(pool, queue, res)
    assert servable_levels(pool, plan) == {"A": 8.0, "B": 4.0}
    assert servable_total(pool, plan) == 12.0
    run_on(pool, a_spot("s", gpus=2, tenant="S"), (1, 2))  # spot is never HP demand
    assert servable_levels(pool, plan_servable(pool, queue, res)) == {"A": 8.0, "B": 4.0}


def test_the_pass_left_nothing_to_count_when_queued_tasks_were_started() -> None:
    pool, queue, res = _build(CASES[0])
    assert plan_servable(pool, queue, res, skip={TaskId("b")}).queued == {}


def test_releases_are_the_chunks_of_the_last_period() -> None:
    """One chunk per finished HP task and node, kept for a guarantee period (3600 s)."""
    releases = HpReleases(3600.0)
    pool = a_pool(8, 8)
    gang = _hp("g", 4, workers=3)
    run_on(pool, gang, (0, 8), (1, 4))  # two workers on n0, one on n1
    releases.note(100.0, pool.remove_task(TaskId("g")))
    spot = a_spot("s", gpus=2)
    run_on(pool, spot, (0, 2))
    releases.note(200.0, pool.remove_task(TaskId("s")))  # spot frees nothing HP wanted
    assert releases.chunks(3699.0) == (8.0, 4.0)
    assert releases.chunks(3700.0) == ()


def test_claims_are_a_copy_per_plan() -> None:
    pool, queue, res = _build(CASES[0])
    first = plan_servable(pool, queue, res)
    first.claims[:] = 0
    assert np.array_equal(plan_servable(pool, queue, res).claims, np.array([0.0, 4.0]))
