"""Node liveness rules (services/preemption/liveness.py), worked by hand: freshness from the node's
`sampled_at` bounded by the router's timestamp, silence against what was heard, the deaf time
credited back after a stall, the mass-silence guard and the kill switch."""

from __future__ import annotations

import pytest

from gfs.services.preemption.liveness import (
    INPUT_LAG,
    KILL_SWITCH,
    MASS_SILENCE,
    HeardClock,
    LivenessRules,
    credit,
    freshness,
    judge,
)

RULES = LivenessRules(timeout_s=30.0, max_skew_s=10.0, mass_share=0.55)


@pytest.mark.parametrize(
    ("sampled_at", "received", "fresh"),
    [
        (995.0, 1000.0, 995.0),  # sampled 5 s before the router forwarded it: as sampled
        (1200.0, 1000.0, 1000.0),  # node clock 200 s ahead: no later than the forward
        (900.0, 1000.0, 990.0),  # node clock behind (or a buffered sample): at most 10 s old then
        (990.0, 1000.0, 990.0),  # exactly at the skew bound
    ],
)
def test_freshness_is_sampled_at_clamped_by_the_forward_time(
    sampled_at: float, received: float, fresh: float
) -> None:
    assert freshness(sampled_at, received, 10.0) == fresh


def test_a_backlog_read_late_does_not_look_fresh() -> None:
    # Forwarded at 1000 (sampled 999), processed at 1100: freshness stays 999, not 1100.
    assert freshness(999.0, 1000.0, 10.0) == 999.0


def test_silence_counts_against_what_was_heard_not_the_wall_clock() -> None:
    seen = {"a": 1000.0, "b": 1000.0, "c": 1000.0}
    # The input stalled at 1005; at 1100 every node is 100 s old by the wall clock, but only 5 s
    # against what was heard, and the lag (95 s) is over the timeout: held as input lag.
    v = judge(seen, [], seen, heard=1005.0, now=1100.0, rules=RULES)
    assert v.lost == () and v.held == INPUT_LAG and v.silent == ("a", "b", "c")
    # Lag under the timeout (25 s): judged against heard = 1025 -> 25 s silent, none lost.
    v = judge(seen, [], seen, heard=1025.0, now=1050.0, rules=RULES)
    assert v.lost == () and v.silent == () and v.held is None


def test_one_silent_node_of_three_is_lost() -> None:
    seen = {"a": 1000.0, "b": 1040.0, "c": 1040.0}
    v = judge(seen, [], seen, heard=1031.0, now=1031.5, rules=RULES)  # a: 31 s > 30 s
    assert v.lost == ("a",) and v.held is None
    v = judge(seen, [], seen, heard=1030.0, now=1030.5, rules=RULES)  # a: exactly 30 s, not over
    assert v.lost == ()


def test_mass_silence_holds_more_than_the_share_of_a_pool() -> None:
    nodes = ["a", "b", "c", "d"]
    two = {"a": 1000.0, "b": 1000.0, "c": 1050.0, "d": 1050.0}  # 2 of 4 = 50 % <= 55 %: lost
    v = judge(nodes, [], two, heard=1050.0, now=1050.0, rules=RULES)
    assert v.lost == ("a", "b") and v.held is None
    three = two | {"c": 1000.0}  # 3 of 4 = 75 % > 55 %: none lost
    v = judge(nodes, [], three, heard=1050.0, now=1050.0, rules=RULES)
    assert v.lost == () and v.held == MASS_SILENCE and v.silent == ("a", "b", "c")
    # Nodes already down do not count: of the live b, c, d two are silent (67 %): held.
    v = judge(nodes, ["a"], three, heard=1050.0, now=1050.0, rules=RULES)
    assert v.lost == () and v.held == MASS_SILENCE and v.silent == ("b", "c")


def test_a_single_silent_node_is_lost_even_in_a_one_node_pool() -> None:
    # The guard needs at least two silent nodes: one node of one is 100 %, but it is lost.
    v = judge(["a"], [], {"a": 1000.0}, heard=1031.0, now=1031.0, rules=RULES)
    assert v.lost == ("a",)


def test_two_of_two_silent_is_held() -> None:
    seen = {"a": 1000.0, "b": 1000.0}
    v = judge(seen, [], seen, heard=1031.0, now=1031.0, rules=RULES)
    assert v.lost == () and v.held == MASS_SILENCE


def test_the_kill_switch_stops_node_lost() -> None:
    seen = {"a": 1000.0, "b": 1050.0, "c": 1050.0}
    v = judge(seen, [], seen, heard=1050.0, now=1050.0, rules=RULES, kill_switch=True)
    assert v.lost == () and v.held == KILL_SWITCH and v.silent == ("a",)


def test_deaf_time_is_credited_when_a_stall_ends() -> None:
    clock = HeardClock()
    assert clock.advance(heard=1000.0, now=1000.5) == 0.0  # lag 0.5: normal
    assert clock.advance(heard=1000.0, now=1020.0) == 0.0  # lag 20: stalled, nothing yet
    assert clock.advance(heard=1000.0, now=1040.0) == 0.0  # lag 40
    # The input resumed: lag 0.2; the 40 s of lag above the 3-s tolerance are credited (37 s).
    assert clock.advance(heard=1040.8, now=1041.0) == pytest.approx(37.0)
    assert clock.advance(heard=1041.8, now=1042.0) == 0.0


def test_a_partial_catch_up_credits_what_went_away() -> None:
    clock = HeardClock()
    clock.advance(heard=1000.0, now=1020.0)  # lag 20
    assert clock.advance(heard=1010.0, now=1021.0) == pytest.approx(9.0)  # lag 11: 20 - 11
    assert clock.advance(heard=1021.0, now=1022.0) == pytest.approx(8.0)  # lag 1: 11 - 3
    assert clock.advance(heard=1022.5, now=1023.0) == 0.0  # lag 1 -> 0.5: within tolerance


def test_jitter_within_the_tolerance_is_never_credited() -> None:
    clock = HeardClock()
    total = 0.0
    for i, lag in enumerate([0.2, 2.9, 0.1, 2.5, 0.0, 2.99, 0.3] * 10):
        now = 1000.0 + i
        total += clock.advance(heard=now - lag, now=now)
    assert total == 0.0


def test_credit_moves_nodes_forward_but_not_past_heard() -> None:
    seen = {"a": 1000.0, "b": 1035.0, "c": 1039.0}
    credit(seen, 37.0, heard=1040.0)
    assert seen == {"a": 1037.0, "b": 1040.0, "c": 1040.0}
    seen2 = {"d": 1045.0}  # fresher than heard (its sample was forwarded after the last fetch)
    credit(seen2, 37.0, heard=1040.0)
    assert seen2 == {"d": 1045.0}


def test_after_a_broker_outage_nodes_get_their_timeout_again() -> None:
    """The scenario end to end: nodes heard at 1000, a 60-s outage (timeout 30 s), the input back
    at 1061 with no heartbeat yet: nobody is lost; a node still silent 31 s later is."""
    seen = {"a": 1000.0, "b": 1000.0, "c": 1000.0}
    clock = HeardClock()
    clock.advance(heard=1000.5, now=1001.0)
    for now in (1010.0, 1030.0, 1060.0):  # during the outage: deaf, held as input lag
        clock.advance(heard=1000.5, now=now)
        assert judge(seen, [], seen, heard=1000.5, now=now, rules=RULES).lost == ()
    credit(seen, clock.advance(heard=1060.8, now=1061.0), heard=1060.8)  # lag 59.5 s - 3 s = 56.5 s credited
    assert seen == {"a": 1056.5, "b": 1056.5, "c": 1056.5}
    assert judge(seen, [], seen, heard=1060.8, now=1061.0, rules=RULES).lost == ()
    seen["b"] = seen["c"] = 1080.0  # b and c report again; a never does
    assert judge(seen, [], seen, heard=1087.5, now=1088.0, rules=RULES).lost == ("a",)
