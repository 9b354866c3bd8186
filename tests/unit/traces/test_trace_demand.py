"""HP demand series: a hand-worked tiny trace, a brute-force property, the canonical CSV."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfs.services.simulator.demand import (
    DemandSeries,
    hp_demand_series,
    pool_totals,
    read_canonical_csv,
    write_canonical_csv,
)
from gfs.services.simulator.traces.records import JobClass, Trace, TraceJob, TraceNode

NODES = (TraceNode("n0", "A10", 1, 128), TraceNode("n1", "H800", 8, 192))


def job(name: str, org: str, model: str, gpus: float, workers: int, submit: float, duration: float,
        kind: JobClass = "HP") -> TraceJob:  # fmt: skip
    return TraceJob(name, org, model, 8.0, gpus, workers, submit, duration, kind)


def trace_of(*jobs: TraceJob) -> Trace:
    ordered = tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name)))
    return Trace(NODES, ordered, max((j.submit_s + j.duration_s for j in jobs), default=0.0))


# Minute m samples job j iff submit <= 60 m < submit + duration.
TINY = trace_of(
    job("a", "x", "A10", 1.0, 1, 0, 120),  # minutes 0, 1 (120 < 120 is false)
    job("b", "x", "A10", 0.5, 2, 30, 3600),  # 1.0 GPU; 30 <= 60m < 3630: minutes 1..60
    job("c", "y", "A10", 1.0, 3, 3540, 120),  # 3 GPUs; 3540 <= 60m < 3660: minutes 59, 60
    job("d", "x", "A10", 8.0, 1, 0, 9999, "SPOT"),  # Spot: never HP demand
    job("e", "x", "H800", 8.0, 1, 7200, 0),  # zero duration: sampled on no minute
    job("f", "x", "A10", 1.0, 1, 7199, 2),  # 7199 <= 60m < 7201: minute 120 (hour 2)
)
# Horizon = 7201 s (job f) -> ceil(7201 / 3600) = 3 hours.
# (A10, x): m0 = 1 (a), m1 = 2 (a + b), m2..m60 = 1 (b), m120 = 1 (f)
#   -> hourly peaks [2, 1 (m60), 1 (m120)]
# (A10, y): m59 = m60 = 3 -> [3, 3, 0]
# (H800, x): only job e, which covers no minute -> [0, 0, 0]
# A10 pool per minute: m0 1, m1 2, m2..m58 1, m59 = 1 + 3 = 4, m60 = 4, m120 = 1 -> peaks [4, 4, 1];
# hour 0's pool peak (4) is below the sum of the tenants' peaks (2 + 3 = 5): they peak at different minutes.
EXPECTED_KEYS = (("A10", "x"), ("A10", "y"), ("H800", "x"))
EXPECTED_HOURLY = np.array([[2, 3, 0], [1, 3, 0], [1, 0, 0]], dtype=float)
EXPECTED_POOLS = {"A10": [4.0, 4.0, 1.0], "H800": [0.0, 0.0, 0.0]}


def test_hand_worked_series() -> None:
    series = hp_demand_series(TINY)
    assert series.keys == EXPECTED_KEYS
    np.testing.assert_array_equal(series.hourly, EXPECTED_HOURLY)


def test_pool_total_is_the_peak_of_the_minute_total_not_the_sum_of_peaks() -> None:
    totals = pool_totals(hp_demand_series(TINY))
    assert {k: v.tolist() for k, v in totals.items()} == EXPECTED_POOLS


def test_n_hours_truncates_and_extends() -> None:
    np.testing.assert_array_equal(hp_demand_series(TINY, n_hours=1).hourly, EXPECTED_HOURLY[:1])
    longer = hp_demand_series(TINY, n_hours=5).hourly
    np.testing.assert_array_equal(longer[:3], EXPECTED_HOURLY)
    np.testing.assert_array_equal(longer[3:], 0.0)


def test_csv_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "demand.csv"
    series = hp_demand_series(TINY)
    write_canonical_csv(series, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "time,tenant,pool,demand_gpus"
    assert lines[1] == "2024-03-01T00:00:00Z,x,A10,2"
    assert lines[2] == "2024-03-01T00:00:00Z,y,A10,3"
    assert lines[-1] == "2024-03-01T02:00:00Z,x,H800,0"
    assert len(lines) == 1 + 3 * 3
    again = read_canonical_csv(path)
    assert again.keys == series.keys
    np.testing.assert_array_equal(again.hourly, series.hourly)


def test_series_from_csv_has_no_pool_peaks_unless_upper_bound_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / "demand.csv"
    write_canonical_csv(hp_demand_series(TINY), path)
    again = read_canonical_csv(path)
    with pytest.raises(ValueError, match="allow_upper_bound"):
        pool_totals(again)
    assert pool_totals(again, allow_upper_bound=True)["A10"].tolist() == [5.0, 4.0, 1.0]


def test_fractional_sums_are_exact_after_rounding() -> None:
    jobs = [job(f"j{i}", "x", "A10", 0.1, 1, 0, 600) for i in range(3)]
    series = hp_demand_series(trace_of(*jobs))
    assert series.hourly[0, 0] == 0.3


def brute_force(trace: Trace, n_hours: int) -> tuple[DemandSeries, dict[str, list[float]]]:
    """Independent per-minute loop over jobs: the definition, written the slow way."""
    hp = [j for j in trace.jobs if j.job_class == "HP"]
    keys = sorted({(j.gpu_model, j.organization) for j in hp})
    minutes = np.zeros((n_hours * 60, len(keys)))
    for m in range(n_hours * 60):
        for j in hp:
            if j.submit_s <= 60 * m < j.submit_s + j.duration_s:
                minutes[m, keys.index((j.gpu_model, j.organization))] += j.gpus_per_worker * j.workers
    hourly = minutes.reshape(n_hours, 60, len(keys)).max(axis=1)
    pools: dict[str, list[float]] = {}
    for pool in sorted({k[0] for k in keys}):
        cols = [i for i, k in enumerate(keys) if k[0] == pool]
        pools[pool] = minutes[:, cols].sum(axis=1).reshape(n_hours, 60).max(axis=1).tolist()
    return DemandSeries(tuple(keys), hourly), pools


random_job = st.builds(
    job,
    name=st.integers(0, 10**6).map(str),
    org=st.sampled_from(["a", "b"]),
    model=st.sampled_from(["A10", "H800"]),
    gpus=st.sampled_from([0.5, 1.0, 8.0]),
    workers=st.integers(1, 4),
    submit=st.integers(0, 3 * 3600),
    duration=st.integers(0, 3 * 3600),
    kind=st.sampled_from(["HP", "HP", "SPOT"]),
)


@given(st.lists(random_job, max_size=8, unique_by=lambda j: j.name))
def test_matches_brute_force(jobs: list[TraceJob]) -> None:
    trace = trace_of(*jobs)
    n_hours = max(1, math.ceil(trace.horizon_s / 3600))
    expected, pools = brute_force(trace, n_hours)
    got = hp_demand_series(trace)
    assert got.keys == expected.keys
    np.testing.assert_allclose(got.hourly, expected.hourly.reshape(got.hourly.shape), atol=1e-9)
    totals = pool_totals(got)
    assert sorted(totals) == sorted(pools)
    for pool, values in pools.items():
        np.testing.assert_allclose(totals[pool], values, atol=1e-9)
