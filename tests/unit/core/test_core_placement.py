"""Normal placement (spec 5.1): best fit with class affinity and eviction score; first fit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from builders import HP, SPOT, a_pool, a_spot, a_task, run_on

from gfs.services.core.placement import BestFit, FirstFit, place_task
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskClass


@dataclass(frozen=True)
class ChooseCase:
    id: str
    pool: PoolState
    gpus: int
    cls: TaskClass
    expected: int


def _scored(pool: PoolState, scores: list[int]) -> PoolState:
    pool.eviction_score = np.asarray(scores, dtype=np.int64)
    return pool


BEST_FIT = [
    # node0: 4 spot (free 4, score 500); node1 empty (900); node2: 6 HP (free 2, score 300-6=294)
    ChooseCase(
        "fewest-free-wins",
        run_on(run_on(a_pool(8, 8, 8), a_spot("s", gpus=4), (0, 4)), a_task("h", gpus=6), (2, 6)),
        2,
        HP,
        2,
    ),
    # both nodes free 4; HP prefers the node with HP (500-4 < 500-0), spot the one with spot
    ChooseCase(
        "hp-affinity",
        run_on(run_on(a_pool(8, 8), a_task("h", gpus=4), (0, 4)), a_spot("s", gpus=4), (1, 4)),
        2,
        HP,
        0,
    ),
    ChooseCase(
        "spot-affinity",
        run_on(run_on(a_pool(8, 8), a_task("h", gpus=4), (0, 4)), a_spot("s", gpus=4), (1, 4)),
        2,
        SPOT,
        1,
    ),
    # equal scores: spot prefers the high eviction score (few evictions), HP the low one
    ChooseCase("spot-high-eviction-score", _scored(a_pool(8, 8), [5000, 9900]), 1, SPOT, 1),
    ChooseCase("hp-low-eviction-score", _scored(a_pool(8, 8), [9900, 5000]), 1, HP, 1),
    ChooseCase("tie-by-index", a_pool(8, 8), 8, HP, 0),
    ChooseCase("nothing-fits", run_on(a_pool(8), a_task("h", gpus=6), (0, 6)), 4, HP, -1),
]


@pytest.mark.parametrize("case", BEST_FIT, ids=[c.id for c in BEST_FIT])
def test_best_fit_choose(case: ChooseCase) -> None:
    assert BestFit().choose(case.pool, case.gpus, case.cls) == case.expected


FIRST_FIT = [
    ChooseCase("first-with-room", run_on(a_pool(8, 8), a_task("h", gpus=7), (0, 7)), 1, HP, 0),
    ChooseCase("skips-full", run_on(a_pool(8, 8), a_task("h", gpus=7), (0, 7)), 2, HP, 1),
    ChooseCase("nothing-fits", run_on(a_pool(8), a_task("h", gpus=7), (0, 7)), 2, SPOT, -1),
]


@pytest.mark.parametrize("case", FIRST_FIT, ids=[c.id for c in FIRST_FIT])
def test_first_fit_choose(case: ChooseCase) -> None:
    assert FirstFit().choose(case.pool, case.gpus, case.cls) == case.expected


@pytest.mark.parametrize("chooser", [BestFit(), FirstFit()], ids=["best-fit", "first-fit"])
@pytest.mark.parametrize("workers", [1, 2, 3, 5, 6])
def test_fill_equals_repeated_choose(chooser: BestFit | FirstFit, workers: int) -> None:
    pool = run_on(run_on(a_pool(8, 8, 8, 4), a_spot("s", gpus=4), (0, 4)), a_task("h", gpus=2), (3, 2))
    expected: dict[int, int] = {}
    for _ in range(workers):
        node = chooser.choose(pool, 2, SPOT)
        if node < 0:
            break
        pool.take_whole(node, 2, SPOT)
        expected[node] = expected.get(node, 0) + 1
    for node, n in expected.items():
        pool.give_whole(node, 2 * n, SPOT)
    got = chooser.fill(pool, 2, SPOT, workers)
    assert got is not None and dict(got) == expected


def test_gang_is_placed_whole_or_not_at_all() -> None:
    pool = a_pool(8, 8)
    assert place_task(pool, a_spot("g", gpus=8, workers=3), BestFit()) is None
    before = pool.free.copy()
    placements = place_task(pool, a_spot("g", gpus=4, workers=3), BestFit())
    assert placements is not None and sum(p.gpus for p in placements) == 12
    assert (pool.free == before).all()  # placing decides only; nothing is reserved


def test_fractional_best_fit_shares_the_fullest_gpu() -> None:
    pool = a_pool(1, 1, 1)
    from builders import run_fraction

    run_fraction(pool, a_task("a", gpus=0.5), 0)
    run_fraction(pool, a_task("b", gpus=0.75), 1)
    placements = place_task(pool, a_task("c", gpus=0.25), BestFit())
    assert placements is not None and placements[0].slot == 1  # 0.25 left there: the tightest fit
    placements = place_task(pool, a_task("d", gpus=0.5), BestFit())
    assert placements is not None and placements[0].slot == 0
