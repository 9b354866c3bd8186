"""GFS victim selection (spec 5.2): two-pointer per node, node cost; the fifo first-node rule."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from builders import a_pool, a_spot, a_task, run_fraction, run_on

from gfs.services.core.ids import TaskId
from gfs.services.core.two_pointer import fraction_two_pointer, two_pointer
from gfs.services.core.victims import PreemptionContext, node_cost
from gfs.services.core.victims_first_node import FirstNodeVictims
from gfs.services.core.victims_gfs import GfsVictims


@dataclass(frozen=True)
class TwoPointerCase:
    id: str
    idle: int
    jobs: tuple[tuple[str, int, float], ...]  # (task, GPUs on the node, cost)
    need: int
    victims: tuple[str, ...]


TWO_POINTER = [
    # a(4,100) spared (8-4 >= 4); b cannot be spared (4-2 < 4) -> evicted; c from the cheap end
    # cannot be spared either (4-2 < 4) -> evicted.
    TwoPointerCase("evict-the-cheaper-two", 0, (("a", 4, 100), ("b", 2, 50), ("c", 2, 10)), 4, ("b", "c")),
    # idle 2 + b's 2 cover the need once a is spared
    TwoPointerCase("idle-counts", 2, (("a", 4, 100), ("b", 2, 50)), 4, ("b",)),
    # a and b spared from the expensive end, c is all that is left
    TwoPointerCase("spare-expensive-first", 0, (("a", 2, 100), ("b", 2, 50), ("c", 4, 10)), 4, ("c",)),
    # alternation: spare a, evict b, spare d from the cheap end, evict c
    TwoPointerCase(
        "alternate-ends", 0, (("a", 1, 100), ("b", 3, 50), ("c", 3, 20), ("d", 1, 10)), 6, ("b", "c")
    ),
    TwoPointerCase("tie-by-id", 0, (("y", 4, 10), ("x", 4, 10)), 8, ("x", "y")),
]


@pytest.mark.parametrize("case", TWO_POINTER, ids=[c.id for c in TWO_POINTER])
def test_two_pointer(case: TwoPointerCase) -> None:
    holdings: dict[TaskId, frozenset[int]] = {}
    next_id = case.idle
    for tid, n, _ in case.jobs:
        holdings[TaskId(tid)] = frozenset(range(next_id, next_id + n))
        next_id += n
    cost = {TaskId(t): c for t, _, c in case.jobs}
    victims, left = two_pointer(holdings, frozenset(range(next_id)), cost, case.need)
    assert tuple(victims) == case.victims
    assert len(left) >= case.need


def test_fraction_two_pointer_checks_the_last_job() -> None:
    # HP 0.25 on the GPU, spot a (0.25, expensive) and b (0.25, cheap); HP needs 0.5.
    # available 0.75: spare a (0.5 left >= 0.5); then l == r on b: 0.25 < 0.5 -> evict b.
    # With the reference code's l < r the loop would stop before b and the HP task would not fit.
    fractions = {TaskId("a"): 0.25, TaskId("b"): 0.25}
    costs = {TaskId("a"): 100.0, TaskId("b"): 10.0}
    assert fraction_two_pointer(fractions, 0.75, costs, 0.5) == [TaskId("b")]


def _ctx(now: float = 1000.0, failed: int = 0, succeeded: int = 0) -> PreemptionContext:
    return PreemptionContext(
        now=now, failed_periods=failed, succeeded_periods=succeeded, t_win_s=31 * 86400.0
    )


def test_node_cost_formula() -> None:
    pool = a_pool(8, 8)  # C = 16
    # (F + R) / (F + S + R) + 5 * c / (C * T) = 3/11 + 5 * 1000 / (16 * 2678400)
    assert node_cost(1000.0, 1, pool, _ctx(failed=2, succeeded=8)) == pytest.approx(
        3 / 11 + 5 * 1000 / (16 * 2678400)
    )


def test_gfs_best_fit_on_preemptible_capacity() -> None:
    pool = a_pool(8, 8)
    run_on(pool, a_task("h0", gpus=4), (0, 4))
    run_on(pool, a_spot("s1", gpus=4), (0, 4))
    run_on(pool, a_task("h1", gpus=2), (1, 2))
    run_on(pool, a_spot("s2", gpus=2), (1, 2))
    run_on(pool, a_spot("s3", gpus=4), (1, 4))
    # non-HP GPUs: node0 4, node1 6 -> the minimum feasible (4) is node0
    plan = GfsVictims().plan(pool, a_task("h", gpus=4), _ctx())
    assert plan is not None and plan.node == 0 and plan.victims == ("s1",)


def test_gfs_picks_the_node_losing_least_gpu_time() -> None:
    pool = a_pool(8, 8)
    run_on(pool, a_task("h0", gpus=4), (0, 4))
    run_on(pool, a_spot("old", gpus=4), (0, 4), start=0.0)
    run_on(pool, a_task("h1", gpus=4), (1, 4))
    run_on(pool, a_spot("young", gpus=4), (1, 4), start=900.0)
    # one victim on either node (same first term); lost time 4*1000 vs 4*100 -> node1
    plan = GfsVictims().plan(pool, a_task("h", gpus=4), _ctx(now=1000.0))
    assert plan is not None and plan.node == 1 and plan.victims == ("young",)


def test_gfs_no_plan_when_hp_fills_every_node() -> None:
    pool = run_on(a_pool(8), a_task("h0", gpus=6), (0, 6))
    assert GfsVictims().plan(pool, a_task("h", gpus=4), _ctx()) is None


def test_gfs_fractional_plan_on_shared_gpu() -> None:
    pool = a_pool(1, 1)
    run_fraction(pool, a_task("hp", gpus=0.25), 0)
    run_fraction(pool, a_spot("a", gpus=0.25), 0, start=0.0)
    run_fraction(pool, a_spot("b", gpus=0.5), 0, start=500.0)
    run_on(pool, a_spot("w", gpus=1), (1, 1))
    plan = GfsVictims().plan(pool, a_task("h", gpus=0.5), _ctx(now=1000.0))
    # slot 0: available 0.75; sorted by cost: a (250) > b (250)? a: 0.25*1000=250, b: 0.5*500=250,
    # tie -> by id: a first. spare a (0.75-0.25=0.5 >= 0.5), b cannot be spared -> evict b.
    assert plan is not None and plan.slot == 0 and plan.victims == ("b",)


def test_first_node_evicts_in_placement_order_until_enough() -> None:
    pool = a_pool(8, 8)
    run_on(pool, a_task("h0", gpus=8), (0, 8))
    run_on(pool, a_spot("a", gpus=2), (1, 2))
    run_on(pool, a_spot("b", gpus=4), (1, 4))
    run_on(pool, a_spot("c", gpus=2), (1, 2))
    plan = FirstNodeVictims().plan(pool, a_task("h", gpus=4), _ctx())
    assert plan is not None and plan.node == 1 and plan.victims == ("a", "b")
