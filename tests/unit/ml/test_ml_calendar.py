"""Calendar covariates: dates checked against the published 2020 and 2024 Chinese calendars."""

from __future__ import annotations

from datetime import date, datetime

import numpy as np
import pytest

from gfs.ml.calendar import calendar_index, is_workday


@pytest.mark.parametrize(
    ("day", "workday"),
    [
        pytest.param(date(2024, 3, 1), True, id="sim-origin-friday"),
        pytest.param(date(2024, 3, 2), False, id="plain-saturday"),
        pytest.param(date(2024, 5, 1), False, id="labour-day-2024"),
        pytest.param(date(2024, 4, 28), True, id="makeup-sunday-2024"),
        pytest.param(date(2020, 5, 4), False, id="labour-holiday-monday-2020"),
        pytest.param(date(2020, 5, 9), True, id="makeup-saturday-2020"),
        pytest.param(date(2030, 1, 7), True, id="other-year-monday"),
    ],
)
def test_is_workday(day: date, workday: bool) -> None:
    assert is_workday(day) is workday


def test_calendar_index_from_simulator_origin() -> None:
    # hour 0 = Fri 2024-03-01 00:00 (weekday 4); hour 33 = Sat 09:00 (weekday 5, not a workday)
    idx = calendar_index(datetime(2024, 3, 1), np.array([0, 33]))
    assert idx.tolist() == [[0, 4, 1], [9, 5, 0]]
