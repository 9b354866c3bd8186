"""Normal placement and quota of every baseline/ablation on small clusters, each with a case where it
must differ from GFS. Expected choices worked out by hand in the comments."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from baseline_builders import hp, make_pool, spot

from gfs.services.core.placement_fgd import fragmentation
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.quota import ForecastQuota, QuotaInputs, ReactiveQuota
from gfs.services.core.task import TaskClass


def spread_or_pack() -> PoolState:
    """n0 (8): HP 6, 2 free. n1 (8): HP 2, 6 free. n2 (4): empty."""
    pool = make_pool(8, 8, 4)
    hp(pool, "h0", 0, 6)
    hp(pool, "h1", 1, 2)
    return pool


def affinity() -> PoolState:
    """n0 (8): HP 4, 4 free. n1 (8): spot 4, 4 free."""
    pool = make_pool(8, 8)
    hp(pool, "h", 0, 4)
    spot(pool, "s", 1, 4, start=0)
    return pool


def fragments() -> PoolState:
    """n0 (8): HP 6, 2 free. n1 (8): HP 3, 5 free."""
    pool = make_pool(8, 8)
    hp(pool, "h0", 0, 6)
    hp(pool, "h1", 1, 3)
    return pool


CASES: list[tuple[str, Callable[[], PoolState], int, TaskClass, str, int]] = [
    # GFS best fit: score (free + 1) * 100 - exist[HP]: n0 300 - 6, n1 700 - 2, n2 500 -> n0.
    ("gfs-best-fit", spread_or_pack, 2, TaskClass.HP, "gfs", 0),
    # k8s LeastAllocated: free share n0 2/8, n1 6/8, n2 4/4 -> n2 (spreads), unlike GFS.
    ("k8s-least-allocated", spread_or_pack, 2, TaskClass.HP, "k8s-priority", 2),
    # GFS spot: scores n0 500 - 0 (no spot there), n1 500 - 4 -> n1 (next to spot).
    ("gfs-spot-affinity", affinity, 2, TaskClass.SPOT, "gfs", 1),
    # Lyra packs on free GPUs only: 4 = 4 -> node index -> n0, unlike GFS.
    ("lyra-no-affinity", affinity, 2, TaskClass.SPOT, "lyra", 0),
    # GFS: fewest free -> n0. FGD (hundredths): n0 frag(1) - frag(2) = 65 - 110 = -45;
    # n1 frag(4) - frag(5) = 200 - 265 = -65 -> n1, unlike GFS.
    ("gfs-fewest-free", fragments, 1, TaskClass.HP, "gfs", 0),
    ("fgd-hp", fragments, 1, TaskClass.HP, "fgd", 1),
    ("fgd-spot", fragments, 1, TaskClass.SPOT, "fgd", 1),
    ("fgd-quota-variant", fragments, 1, TaskClass.SPOT, "fgd+gfs-quota", 1),
    # Chronus consolidates like GFS (best fit): n0.
    ("chronus-best-fit", fragments, 1, TaskClass.HP, "chronus", 0),
    # Nothing fits 8 anywhere -> -1 for every chooser.
    ("k8s-infeasible", fragments, 8, TaskClass.HP, "k8s-priority", -1),
    ("fgd-infeasible", fragments, 8, TaskClass.HP, "fgd", -1),
    ("lyra-infeasible", fragments, 8, TaskClass.HP, "lyra", -1),
]


@pytest.mark.parametrize(
    ("build", "gpus", "cls", "policy", "node"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_node_choice(
    build: Callable[[], PoolState], gpus: int, cls: TaskClass, policy: str, node: int
) -> None:
    assert build_policy(policy).placement.choose(build(), gpus, cls) == node


@pytest.mark.parametrize(
    ("free", "hundredths"),
    [
        (0, 0),
        (1, 35 * 0 + 10 * 1 + 5 * 1 + 50 * 1),  # one GPU: unusable for 2-, 4-, 8-GPU tasks
        (3, 10 * 1 + 5 * 3 + 50 * 3),
        (4, 50 * 4),
        (8, 0),  # fits every typical task exactly
        (12, 50 * 4),
    ],
    ids=["empty", "one", "three", "four", "eight", "twelve"],
)
def test_fragmentation_is_expected_unusable_gpus(free: int, hundredths: int) -> None:
    assert int(fragmentation(np.array([free]))[0]) == hundredths


def _inputs(eta: float = 1.0) -> QuotaInputs:
    # 100 GPUs, 40 idle, 20 spot running; forecast HP p-quantile 10 for each of 4 hours; 10 of the
    # last 20 guarantee periods failed (ER 0.5 >= 1.5 x eps = 0.15).
    return QuotaInputs(
        capacity=100,
        idle_gpus=40,
        spot_in_use=20.0,
        hp_quantile=np.full(4, 10.0),
        eta=eta,
        failed_recent=10,
        succeeded_recent=10,
        head_wait_s=None,
    )


@pytest.mark.parametrize(
    ("policy", "quota_1h", "eta"),
    [
        # GFS: spare = 100 - 10 = 90; eta = 1 x eps / ER = 0.1 / 0.5 = 0.2 -> Q = 18.
        ("gfs", 18.0, 0.2),
        ("gfs-fifo-victims", 18.0, 0.2),
        # No feedback: eta stays 1 -> Q = 90 (differs from GFS).
        ("gfs-no-feedback", 90.0, 1.0),
        # Reactive (no forecast): spot may take the whole pool -> Q = capacity 100.
        ("gfs-no-forecast", 100.0, 1.0),
        ("k8s-priority", 100.0, 1.0),
        ("lyra", 100.0, 1.0),
        ("fgd", 100.0, 1.0),
        ("chronus", 100.0, 1.0),
        # Baselines with GFS's quota get GFS's numbers.
        ("k8s-priority+gfs-quota", 18.0, 0.2),
        ("lyra+gfs-quota", 18.0, 0.2),
        ("fgd+gfs-quota", 18.0, 0.2),
        ("chronus+gfs-quota", 18.0, 0.2),
    ],
)
def test_quota(policy: str, quota_1h: float, eta: float) -> None:
    out = build_policy(policy).quota.refresh(_inputs())
    assert out.quota[1] == pytest.approx(quota_1h)
    assert out.eta == pytest.approx(eta)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Two empty 8-GPU nodes, 2 workers x 4 GPUs. GFS packs: after the first worker n0 has 4 free
        # (score 500 < 900), so both go to n0.
        ("gfs", [(0, 2)]),
        # k8s spreads: free shares tie at 1.0 -> n0; then n0 0.5 < n1 1.0 -> n1.
        ("k8s-priority", [(0, 1), (1, 1)]),
        # Lyra packs on free GPUs: n0 (4 < 8) again.
        ("lyra", [(0, 2)]),
        # FGD: first worker: growth frag(4) - frag(8) = 200 on either node -> n0. Second: n0
        # frag(0) - frag(4) = -200 < n1 +200 -> n0.
        ("fgd", [(0, 2)]),
    ],
)
def test_gang_fill(policy: str, expected: list[tuple[int, int]]) -> None:
    pool = make_pool(8, 8)
    assert build_policy(policy).placement.fill(pool, 4, TaskClass.SPOT, 2) == expected
    assert pool.free.tolist() == [8, 8]  # tentative reservations undone


@pytest.mark.parametrize("base", ["k8s-priority", "lyra", "fgd", "chronus"])
def test_gfs_quota_variant_changes_only_the_quota(base: str) -> None:
    plain, variant = build_policy(base), build_policy(f"{base}+gfs-quota")
    assert variant.name == f"{base}+gfs-quota"
    assert isinstance(plain.quota, ReactiveQuota) and isinstance(variant.quota, ForecastQuota)
    assert variant.quota.uses_forecast and variant.quota.feedback
    for piece in ("hp_order", "spot_order", "placement", "victims", "use_eviction_scores", "lease_s"):
        assert type(getattr(variant, piece)) is type(getattr(plain, piece)), piece
        if piece in ("use_eviction_scores", "lease_s"):
            assert getattr(variant, piece) == getattr(plain, piece)
