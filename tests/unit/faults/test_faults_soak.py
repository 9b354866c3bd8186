"""The soak run's schedule and summary (services/faults/soak.py), worked by hand."""

from __future__ import annotations

import os

import pytest

from gfs.services.faults.harness import agent_fence
from gfs.services.faults.soak import (
    SoakLog,
    SoakSample,
    kill_schedule,
    late_growth,
    render,
    rss_mb,
    summarize,
)


def test_kills_every_interval_but_not_in_the_last_minute() -> None:
    assert kill_schedule(600.0, 200.0) == [(200.0, "kill:preemption"), (400.0, "kill:preemption")]
    # 540 = 600 - 60 is still allowed; 560 is not.
    assert kill_schedule(600.0, 180.0) == [(180.0, "kill:preemption"), (360.0, "kill:preemption"),
                                           (540.0, "kill:preemption")]  # fmt: skip
    assert kill_schedule(600.0, 0.0) == []


def test_rss_of_this_process_and_of_none() -> None:
    mine = rss_mb(os.getpid())
    assert mine is not None and mine > 1.0
    assert rss_mb(2**22 + 12345) is None  # beyond pid_max on Linux: no such process


def _sample(at: float, quota: float, pre: float | None, lag: int, journal: int) -> SoakSample:
    rss = {"quota": quota} | ({} if pre is None else {"preemption": pre})
    return SoakSample(at, rss, {"g": lag}, {"preemption_journal": journal})


def test_summary_per_interval() -> None:
    log = SoakLog(
        samples=[
            _sample(0.0, 100.0, 200.0, 3, 10),
            _sample(30.0, 110.0, 220.0, 7, 20),
            _sample(60.0, 120.0, None, 2, 30),  # preemption was down at this sample
            _sample(90.0, 99.0, 150.0, 1, 40),
        ],
        failovers=[(50.0, 2.5), (70.0, 3.25)],
        recoveries=[(65.0, "broker", 12.5)],
    )
    out = summarize(log, 60.0)
    assert [row["interval"] for row in out] == [0, 1]
    first, second = out
    # Interval 0 (0-60 s): quota 100, 110 -> median 105; preemption 200, 220 -> 210.
    assert first["rss_mb"]["quota"] == {"max": 110.0, "last": 110.0, "median": 105.0, "vs_first": 0.0}
    assert first["lag_max"] == {"g": 7}
    assert first["rows"] == {"preemption_journal": 20}
    assert first["failover_s"] == [2.5]
    # Interval 1 (60-120 s): quota 120, 99 -> median 109.5, +4.3% on 105; preemption only 150.
    assert second["rss_mb"]["quota"]["median"] == 109.5
    assert second["rss_mb"]["quota"]["vs_first"] == round(109.5 / 105.0 - 1.0, 3)
    assert second["rss_mb"]["preemption"]["median"] == 150.0
    assert second["lag_max"] == {"g": 2}
    assert second["rows"] == {"preemption_journal": 40}
    assert second["failover_s"] == [3.25]
    assert first["outage_recovery_s"] == [] and second["outage_recovery_s"] == ["broker 12.5"]
    text = render(out)
    assert "interval 1 (+60 s)" in text and "quota 110 MiB (+4%)" in text and "failover s 3.2" in text
    assert "outage recovery s broker 12.5" in text


def test_summary_of_nothing() -> None:
    assert summarize(SoakLog(), 60.0) == []


def test_a_sample_begun_as_the_soak_ended_belongs_to_no_interval() -> None:
    # A 120-s soak in 60-s intervals: the sample begun at 120 s (the stop and the sampler's wake
    # raced) would open a third interval of one sample.
    log = SoakLog(samples=[_sample(0.0, 100.0, 200.0, 3, 10), _sample(70.0, 100.0, 200.0, 3, 20),
                           _sample(120.0, 100.0, 200.0, 3, 30)])  # fmt: skip
    assert [row["interval"] for row in summarize(log, 60.0, 120.0)] == [0, 1]
    assert [row["interval"] for row in summarize(log, 60.0)] == [0, 1, 2]  # no end given: kept


def test_late_growth_compares_the_last_interval_with_the_one_30_minutes_before() -> None:
    # Ten 5-minute intervals: quota grows 100 -> 145 MiB, 5 a step; preemption stays at 200.
    log = SoakLog(samples=[_sample(k * 300.0, 100.0 + 5 * k, 200.0, 0, k) for k in range(10)])
    out = summarize(log, 300.0)
    growth = late_growth(out)
    # Last interval (+2700 s): quota 145; the one at +900 s: 115.
    assert growth["quota"] == pytest.approx(145.0 / 115.0 - 1.0)
    assert growth["preemption"] == pytest.approx(0.0)
    assert "quota +26.1%" in render(out)
    assert late_growth(out[:6]) == {}  # the last interval began 25 min in: nothing 30 min before


def test_the_agents_fence_follows_the_services_node_timeout() -> None:
    assert agent_fence(60.0) == {"AGENT_FENCE_AFTER_S": "45", "AGENT_FENCE_THAW_WITHIN_S": "50"}
    assert agent_fence(30.0) == {"AGENT_FENCE_AFTER_S": "15", "AGENT_FENCE_THAW_WITHIN_S": "20"}
    assert agent_fence(8.0) == {"AGENT_FENCE_AFTER_S": "0"}  # no room under an 8-s timeout: off
