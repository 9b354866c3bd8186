"""Victim choice of every baseline and ablation on small clusters, each next to GFS's choice on the
same cluster. Expected plans are worked out by hand in the comments (NOW = 1000 s)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from baseline_builders import ctx, hp, make_pool, spec, spot

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState


def fewer_victims_elsewhere() -> PoolState:
    """n0 (8): HP 2 + spot b,c,d (2 GPUs each, started 100/200/300): 6 non-HP GPUs.
    n1 (8): spot a (8 GPUs, started 50): 8 non-HP GPUs."""
    pool = make_pool(8, 8)
    hp(pool, "h", 0, 2)
    spot(pool, "b", 0, 2, start=100)
    spot(pool, "c", 0, 2, start=200)
    spot(pool, "d", 0, 2, start=300)
    spot(pool, "a", 1, 8, start=50)
    return pool


def cheap_gang_vs_old_single() -> PoolState:
    """n0, n1, n2 (8 each) with 4 HP GPUs each. n0: spot a (1 worker x 4, started 0: 4000 GPU-s lost);
    n1 and n2: the two workers of gang b (4 GPUs each, started 900: 8 x 100 = 800 GPU-s lost)."""
    pool = make_pool(8, 8, 8)
    for n in range(3):
        hp(pool, f"h{n}", n, 4)
    spot(pool, "a", 0, 4, start=0)
    spot(pool, "b", (1, 2), 4, start=900)
    return pool


def idle_plus_spot() -> PoolState:
    """n0 (8): HP 4, 2 idle, spot a (2 GPUs): 4 non-HP. n1 (8): HP 5, spot b (3 GPUs): 3 non-HP."""
    pool = make_pool(8, 8)
    hp(pool, "h0", 0, 4)
    spot(pool, "a", 0, 2, start=100)
    hp(pool, "h1", 1, 5)
    spot(pool, "b", 1, 3, start=100)
    return pool


def first_node_is_not_best_fit() -> PoolState:
    """n0 (8): spot a (8 GPUs): 8 non-HP. n1 (8): HP 4 + spot b (4 GPUs): 4 non-HP."""
    pool = make_pool(8, 8)
    spot(pool, "a", 0, 8, start=50)
    hp(pool, "h", 1, 4)
    spot(pool, "b", 1, 4, start=100)
    return pool


def single_spot_everywhere() -> PoolState:
    """n0 (8): HP 4 + spot a (4 GPUs, started 100). n1 (8): HP 4 + spot b (4 GPUs, started 300)."""
    pool = make_pool(8, 8)
    hp(pool, "h0", 0, 4)
    spot(pool, "a", 0, 4, start=100)
    hp(pool, "h1", 1, 4)
    spot(pool, "b", 1, 4, start=300)
    return pool


CASES: list[tuple[str, Callable[[], PoolState], int, str, tuple[int, tuple[str, ...]]]] = [
    # GFS: best fit on preemptible capacity keeps n0 (6 < 8). Two-pointer on n0, costs b 1800 >
    # c 1600 > d 1400: spare b (4 GPUs left >= 4), c cannot be spared (2 < 4) -> evict c; from the
    # cheap end d cannot be spared -> evict d. Victims (c, d).
    ("gfs-two-victims", fewer_victims_elsewhere, 4, "gfs", (0, ("c", "d"))),
    # k8s: n0 needs 2 victims (reprieve b, the oldest; then c, d are both needed), n1 only 1 (a).
    # Fewest victims wins: n1 / a, unlike GFS.
    ("k8s-fewest-victims", fewer_victims_elsewhere, 4, "k8s-priority", (1, ("a",))),
    ("k8s-quota-variant-same-victims", fewer_victims_elsewhere, 4, "k8s-priority+gfs-quota", (1, ("a",))),
    # Both nodes need one victim: k8s takes the node whose victim started latest (b at 300), as GFS
    # does through the lost-work term (b: 4 x 700 = 2800 < a: 4 x 900 = 3600).
    ("k8s-latest-start", single_spot_everywhere, 4, "k8s-priority", (1, ("b",))),
    ("gfs-least-lost-work", single_spot_everywhere, 4, "gfs", (1, ("b",))),
    # GFS: all three nodes have 4 non-HP GPUs and one victim each; lost work n0 4000, n1/n2 800:
    # n1 (first of the cheapest) with gang b.
    ("gfs-cheap-gang", cheap_gang_vs_old_single, 4, "gfs", (1, ("b",))),
    # Lyra: server cost = workers lost: a costs 1, b costs 2 (a 2-worker gang) -> n0 / a, unlike GFS.
    ("lyra-fewest-servers", cheap_gang_vs_old_single, 4, "lyra", (0, ("a",))),
    ("lyra-quota-variant", cheap_gang_vs_old_single, 4, "lyra+gfs-quota", (0, ("a",))),
    # GFS: k = 3, feasible non-HP: n0 4, n1 3 -> best fit n1, victim b.
    ("gfs-best-fit-3", idle_plus_spot, 3, "gfs", (1, ("b",))),
    # FGD: n1: b freed 3, worker takes 3, free 0 before and after: growth 0. n0: evicting a frees 4
    # (2 idle + 2), worker takes 3 -> 1 free; frag(1) - frag(2) = 65 - 110 = -45 (hundredths,
    # frag(f) = 35 (f mod 1) + 10 (f mod 2) + 5 (f mod 4) + 50 (f mod 8)): n0 wins, unlike GFS.
    ("fgd-least-fragmentation", idle_plus_spot, 3, "fgd", (0, ("a",))),
    ("fgd-quota-variant", idle_plus_spot, 3, "fgd+gfs-quota", (0, ("a",))),
    # GFS picks n1 (4 non-HP < 8) / b; first-node victims take the first feasible node n0 / a.
    ("gfs-best-fit-preemptible", first_node_is_not_best_fit, 4, "gfs", (1, ("b",))),
    ("gfs-fifo-victims-first-node", first_node_is_not_best_fit, 4, "gfs-fifo-victims", (0, ("a",))),
    # The quota ablations keep GFS's victims.
    ("gfs-no-forecast-keeps-victims", first_node_is_not_best_fit, 4, "gfs-no-forecast", (1, ("b",))),
    ("gfs-no-feedback-keeps-victims", first_node_is_not_best_fit, 4, "gfs-no-feedback", (1, ("b",))),
]


@pytest.mark.parametrize(
    ("build", "gpus", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_victim_plan(
    build: Callable[[], PoolState], gpus: int, policy: str, expected: tuple[int, tuple[str, ...]]
) -> None:
    pool = build()
    plan = build_policy(policy).victims.plan(pool, spec("new", gpus), ctx())
    assert plan is not None
    assert (plan.node, plan.victims) == expected


@pytest.mark.parametrize("policy", ["chronus", "chronus+gfs-quota"])
def test_chronus_never_preempts_mid_lease(policy: str) -> None:
    # GFS would evict a spot task here (see gfs-best-fit-preemptible); Chronus waits for the lease.
    pool = first_node_is_not_best_fit()
    assert build_policy("gfs").victims.plan(pool, spec("new", 4), ctx()) is not None
    assert build_policy(policy).victims.plan(pool, spec("new", 4), ctx()) is None


@pytest.mark.parametrize("policy", ["k8s-priority", "lyra", "fgd", "gfs"])
def test_no_plan_when_hp_holds_too_much(policy: str) -> None:
    pool = make_pool(8)
    hp(pool, "h", 0, 6)
    spot(pool, "a", 0, 2, start=0)
    assert build_policy(policy).victims.plan(pool, spec("new", 4), ctx()) is None


def test_lyra_greedy_then_reprieve_drops_unneeded_victim() -> None:
    # n0 (8): a (2 GPUs, single), b (gang: 4 GPUs here + 4 on n1), c (2, single); n1 (8): b + HP 4,
    # so only n0 can free 5. GPUs freed per server: a 2/1, b 4/2, c 2/1 all 2 -> ties by server
    # cost then id: a, c, b. a + c free 4 < 5, + b frees 8 -> stop. Reprieve, most expensive first:
    # b (a + c free 4 < 5: kept), a (b + c free 6 >= 5: dropped), c (b alone 4 < 5: kept).
    # Victims in greedy order (c, b), cost 3 servers.
    pool = make_pool(8, 8)
    spot(pool, "a", 0, 2, start=0)
    spot(pool, "b", (0, 1), 4, start=0)
    spot(pool, "c", 0, 2, start=0)
    hp(pool, "h", 1, 4)
    plan = build_policy("lyra").victims.plan(pool, spec("new", 5), ctx())
    assert plan is not None and (plan.node, plan.victims) == (0, ("c", "b"))
