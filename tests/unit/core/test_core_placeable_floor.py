"""The quota's HP floor counts only the queued HP the pool can serve (issue 21, core/placeable.py).

Every row is worked by hand. The pool is the A800 pool's shape: 22 nodes x 8 GPUs = 176 GPUs.
HP runs on 12 whole nodes (96 GPUs), 10 nodes are idle (80 GPUs). The forecast p-quantile handed
to the quota is 90 GPUs for every hour ahead and eta is 1, so Q(1) = 176 - floor(max(90, floor)).
"""

from __future__ import annotations

import numpy as np
import pytest
from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.placeable import fit_workers, placeable_gpus, preemptible_capacity
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings
from gfs.services.core.task import TaskSpec

QUANTILE = np.full(4, 90.0)


def _a800(policy: str = "gfs") -> PoolRuntime:
    rt = PoolRuntime(a_pool(*([8] * 22)), build_policy(policy), RuntimeSettings())
    for n in range(12):
        run_on(rt.state, a_task(f"hp{n}", gpus=8), (n, 8))
    return rt


def _quota(rt: PoolRuntime, *queued: TaskSpec) -> tuple[float, float | None]:
    for spec in queued:
        assert rt.submit(spec, 0.0) is None
    inputs = rt.quota_inputs(0.0, QUANTILE)
    return rt.policy.quota.refresh(inputs).quota[1], inputs.hp_placeable


@pytest.mark.parametrize(
    ("queued", "floor", "q1"),
    [
        # Nothing queued: floor = running 96 > 90 -> Q = 176 - 96 = 80.
        ((), 96.0, 80.0),
        # 8 x 11 needs 11 nodes with 8 GPUs HP does not hold; there are 10: it cannot take a GPU
        # before HP work ends. Floor 96, Q 80 (issue 10's floor: 96 + 88 = 184 -> Q = 0).
        ((a_task("g11", gpus=8, workers=11),), 96.0, 80.0),
        # 8 x 2 fits on two idle nodes: floor 96 + 16 = 112, Q = 64.
        ((a_task("g2", gpus=8, workers=2),), 112.0, 64.0),
        # In queue order: 8 x 11 skipped (no fit), 8 x 2 takes 2 idle nodes, 4 x 3 takes 12 GPUs
        # of the 8 idle nodes left: floor 96 + 16 + 12 = 124, Q = 52.
        (
            (
                a_task("g11", gpus=8, workers=11),
                a_task("g2", gpus=8, workers=2, submit=1.0),
                a_task("g3", gpus=4, workers=3, submit=2.0),
            ),
            124.0,
            52.0,
        ),
    ],
)
def test_the_floor_is_running_plus_the_queued_hp_that_fits(
    queued: tuple[TaskSpec, ...], floor: float, q1: float
) -> None:
    quota, placeable = _quota(_a800(), *queued)
    assert placeable == pytest.approx(floor)
    assert quota == pytest.approx(q1)


def test_issue_10_floor_counts_every_queued_gpu_and_zeroes_the_quota() -> None:
    """The ablation `gfs-queued-floor`: U = max(90, 96 + 88) = 184 > 176 -> F = 0 -> Q = 0."""
    quota, _ = _quota(_a800("gfs-queued-floor"), a_task("g11", gpus=8, workers=11))
    assert quota == 0.0


def test_spot_gpus_count_as_servable_because_hp_can_evict_them() -> None:
    """Spot holds 4 GPUs on each of the 10 idle nodes (40 GPUs): the 8 x 2 gang still fits by
    preemption, so the floor is 96 + 16 = 112 as without spot; Q = 176 - 112 = 64."""
    rt = _a800()
    for n in range(12, 22):
        run_on(rt.state, a_spot(f"s{n}", gpus=4), (n, 4))
    _, placeable = _quota(rt, a_task("g2", gpus=8, workers=2))
    assert placeable == pytest.approx(112.0)


def test_fit_workers_packs_fullest_first_and_changes_nothing_on_a_miss() -> None:
    # Capacities 8, 4, 8: two 4-GPU workers go to node 1 (4, the fullest that fits) then node 0
    # (8 before 8 by index): left 4, 0, 8.
    cap = np.array([8.0, 4.0, 8.0])
    assert fit_workers(cap, a_task("w", gpus=4, workers=2))
    assert cap.tolist() == [4.0, 0.0, 8.0]
    # Three 8-GPU workers do not fit on 4, 0, 8: a miss leaves the capacities as they were.
    assert not fit_workers(cap, a_task("x", gpus=8, workers=3))
    assert cap.tolist() == [4.0, 0.0, 8.0]


def test_a_task_that_does_not_fit_does_not_block_smaller_ones_behind_it() -> None:
    pool = a_pool(8, 8)
    cap = preemptible_capacity(pool)
    # 8 x 3 cannot fit on two nodes; 8 x 1 and 4 x 2 can: 8 + 8 = 16.
    queued = [a_task("a", gpus=8, workers=3), a_task("b", gpus=8), a_task("c", gpus=4, workers=2)]
    assert placeable_gpus(cap, [queued]) == 16.0
