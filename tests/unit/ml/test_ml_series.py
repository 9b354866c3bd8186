"""Loaders and gap handling: explicit fills, loud errors, hand-checked hourly peaks."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from gfs.ml.datasets import load_csv, load_helios, load_series, write_csv
from gfs.ml.series import DemandSeries, SeriesError, fill_gaps

NAN = np.nan
KEYS = (("p", "a"),)


@pytest.mark.parametrize(
    ("column", "expected", "trailing_zero"),
    [
        pytest.param([NAN, NAN, 3, 4], [0, 0, 3, 4], True, id="leading-missing-is-zero"),
        pytest.param([1, NAN, NAN, 4], [1, 1, 1, 4], True, id="short-gap-forward-filled"),
        pytest.param([1, NAN, NAN, NAN, 4], [1, 1, 1, 1, 4], True, id="gap-of-exactly-3h"),
        pytest.param([5, 6, NAN], [5, 6, 0], True, id="trailing-missing-zero-when-loading"),
        pytest.param([5, 6, NAN], [5, 6, 6], False, id="trailing-missing-filled-when-serving"),
        pytest.param([NAN, NAN], [0, 0], True, id="all-missing"),
    ],
)
def test_fill_gaps(column: list[float], expected: list[float], trailing_zero: bool) -> None:
    out = fill_gaps(np.array(column, dtype=float)[:, None], KEYS, trailing_zero=trailing_zero)
    assert out[:, 0].tolist() == expected


@pytest.mark.parametrize(
    "column",
    [
        pytest.param([1, NAN, NAN, NAN, NAN, 4], id="interior-4h"),
        pytest.param([1, 2, NAN, NAN, NAN, NAN], id="trailing-4h-serving"),
    ],
)
def test_long_gap_raises_with_the_series_named(column: list[float]) -> None:
    with pytest.raises(SeriesError, match=r"\('p', 'a'\).*gap of 4 h"):
        fill_gaps(np.array(column, dtype=float)[:, None], KEYS, trailing_zero=False)


def test_negative_demand_rejected() -> None:
    with pytest.raises(SeriesError, match="negative"):
        fill_gaps(np.array([[1.0], [-1.0]]), KEYS)


def test_csv_round_trip(tmp_path: Path) -> None:
    values = np.array([[1.0, 0.0], [2.0, 5.0], [2.0, 7.5]])
    s = DemandSeries((("A100", "org-1"), ("H800", "org-2")), values, datetime(2024, 3, 1))
    path = tmp_path / "s.csv"
    write_csv(s, path)
    first_row = path.read_text().splitlines()[1]
    assert first_row == "2024-03-01T00:00:00Z,org-1,A100,1"
    back = load_series(path)
    assert back.keys == s.keys and back.start == s.start
    np.testing.assert_array_equal(back.values, values)


def test_csv_rows_missing_hours_become_gaps(tmp_path: Path) -> None:
    # org-1 has hours 0 and 2 (hour 1 missing -> forward filled with hour 0's 4);
    # org-2 starts at hour 1 (hour 0 -> 0 demand).
    path = tmp_path / "s.csv"
    path.write_text(
        "time,tenant,pool,demand_gpus\n"
        "2024-03-01T00:00:00Z,org-1,p,4\n"
        "2024-03-01T02:00:00Z,org-1,p,6\n"
        "2024-03-01T01:00:00Z,org-2,p,3\n"
        "2024-03-01T02:00:00Z,org-2,p,\n"
    )
    s = load_csv(path)
    assert s.keys == (("p", "org-1"), ("p", "org-2"))
    # org-2's empty hour 2 is its last row: trailing missing when loading -> 0
    np.testing.assert_array_equal(s.values, [[4, 0], [4, 3], [6, 0]])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param("time,tenant,demand_gpus\n", "missing columns", id="no-pool-column"),
        pytest.param(
            "time,tenant,pool,demand_gpus\n2024-03-01T00:30:00Z,a,p,1\n", "not an hour start", id="half-hour"
        ),
        pytest.param("time,tenant,pool,demand_gpus\n", "no rows", id="empty"),
    ],
)
def test_csv_bad_input(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SeriesError, match=match):
        load_csv(path)


def test_helios_hourly_peak_of_running_plus_pending(tmp_path: Path) -> None:
    vc = tmp_path / "vc"
    vc.mkdir()
    header = "time,running_gpu_num,pending_gpu_num,total_gpu_num\n"
    # hour 0: demands 2+1=3, 5+0=5, 1+1=2 -> peak 5; hour 1: 4+4=8 -> peak 8
    (vc / "vcA_cluster_sequence_vc.csv").write_text(
        header + "2020-05-01 00:00:00,2,1,9\n2020-05-01 00:01:00,5,0,9\n"
        "2020-05-01 00:59:00,1,1,9\n2020-05-01 01:00:00,4,4,9\n"
    )
    # second VC starts an hour later: its hour 0 is zero demand
    (vc / "vcB_cluster_sequence_vc.csv").write_text(header + "2020-05-01 01:30:00,7,0,9\n")
    s = load_helios(tmp_path)
    assert s.keys == (("helios-earth", "vcA"), ("helios-earth", "vcB"))
    assert s.start == datetime(2020, 5, 1)
    np.testing.assert_array_equal(s.values, [[5, 0], [8, 7]])
