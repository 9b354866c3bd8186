"""Calendar covariates (hour of day, weekday, workday) for an hour index and a start datetime.

The workday flag follows the Chinese working calendar, as the paper's code does with the
`chinese_calendar` package (spec 3.2 and 8 #20): both the Helios trace (SenseTime, May 2020) and
the Alibaba trace (2024) come from Chinese clusters. Rather than add a dependency we keep the
State Council's published holiday and make-up-workday dates for the years our data covers;
other years fall back to Monday-Friday.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

import numpy as np


def _days(*spans: tuple[str, str]) -> frozenset[date]:
    out: set[date] = set()
    for a, b in spans:
        d, end = date.fromisoformat(a), date.fromisoformat(b)
        while d <= end:
            out.add(d)
            d += timedelta(days=1)
    return frozenset(out)


# Public holidays (days off) per the State Council notices for 2020 and 2024.
_HOLIDAYS = _days(
    ("2020-01-01", "2020-01-01"),
    ("2020-01-24", "2020-02-02"),
    ("2020-04-04", "2020-04-06"),
    ("2020-05-01", "2020-05-05"),
    ("2020-06-25", "2020-06-27"),
    ("2020-10-01", "2020-10-08"),
    ("2024-01-01", "2024-01-01"),
    ("2024-02-10", "2024-02-17"),
    ("2024-04-04", "2024-04-06"),
    ("2024-05-01", "2024-05-05"),
    ("2024-06-10", "2024-06-10"),
    ("2024-09-15", "2024-09-17"),
    ("2024-10-01", "2024-10-07"),
)
# Weekend days declared working days ("adjusted workdays") in the same notices.
_MAKEUP_WORKDAYS = frozenset(
    date.fromisoformat(d)
    for d in (
        "2020-01-19",
        "2020-02-01",
        "2020-04-26",
        "2020-05-09",
        "2020-06-28",
        "2020-09-27",
        "2020-10-10",
        "2024-02-04",
        "2024-02-18",
        "2024-04-07",
        "2024-04-28",
        "2024-05-11",
        "2024-09-14",
        "2024-09-29",
        "2024-10-12",
    )
)


def is_workday(d: date) -> bool:
    if d in _MAKEUP_WORKDAYS:
        return True
    if d in _HOLIDAYS:
        return False
    return d.weekday() < 5


def calendar_index(start: datetime, hours: np.ndarray) -> np.ndarray:
    """Integer covariates [len(hours), 3]: (hour 0..23, weekday 0..6 Monday=0, workday 0/1)."""
    out = np.empty((len(hours), 3), dtype=np.int64)
    for i, h in enumerate(np.asarray(hours, dtype=np.int64)):
        t = start + timedelta(hours=int(h))
        out[i] = (t.hour, t.weekday(), int(is_workday(t.date())))
    return out


def calendar_features(start: datetime, hours: np.ndarray) -> np.ndarray:
    """Continuous covariates [len(hours), 5]: sin/cos hour, sin/cos weekday, workday flag."""
    idx = calendar_index(start, hours).astype(np.float64)
    hour = 2 * np.pi * idx[:, 0] / 24.0
    wd = 2 * np.pi * idx[:, 1] / 7.0
    return np.stack([np.sin(hour), np.cos(hour), np.sin(wd), np.cos(wd), idx[:, 2]], axis=1)
