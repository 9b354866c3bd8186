"""Hourly demand series: the one in-memory shape every loader produces and every model consumes.

A `DemandSeries` is a dense [T, n_series] matrix of hourly peak demand (GPUs), one column per
(pool, tenant) key, plus the wall-clock start of hour 0 so calendar covariates can be derived from
real timestamps (Helios, users' CSVs) or from the simulator's fixed origin (2024-03-01 00:00).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

SeriesKey = tuple[str, str]  # (pool, tenant)

# The simulator's time origin (hour index 0), a Friday; see services/core/forecast.py.
SIMULATOR_ORIGIN = datetime(2024, 3, 1, 0, 0)

# Gaps of up to this many hours are forward filled; longer ones are an error (see fill_gaps).
MAX_FILL_HOURS = 3


class SeriesError(ValueError):
    """Bad input series: the message says which series and which hours."""


@dataclass(frozen=True, slots=True)
class DemandSeries:
    keys: tuple[SeriesKey, ...]
    values: np.ndarray  # [T, n_series], float64, hourly peak demand, no NaN after loading
    start: datetime  # wall-clock start of hour 0 (naive; calendar is read as given)

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[1] != len(self.keys):
            raise SeriesError(f"values shape {self.values.shape} does not match {len(self.keys)} keys")
        if len(set(self.keys)) != len(self.keys):
            raise SeriesError("duplicate (pool, tenant) keys")

    @property
    def hours(self) -> int:
        return int(self.values.shape[0])

    def time_of(self, hour: int) -> datetime:
        return self.start + timedelta(hours=hour)

    def head(self, end_hour: int) -> DemandSeries:
        """The series truncated to hours [0, end_hour): what a model may see at origin end_hour."""
        return DemandSeries(self.keys, self.values[:end_hour], self.start)


def fill_gaps(
    values: np.ndarray,
    keys: Sequence[SeriesKey],
    *,
    max_fill: int = MAX_FILL_HOURS,
    trailing_zero: bool = True,
) -> np.ndarray:
    """Make a [T, n] matrix with NaN holes usable, explicitly and loudly.

    - Leading NaNs (before a series' first observation) become 0: the tenant had no demand yet.
    - Trailing NaNs after the last observation become 0 as well when loading a recorded file (the
      tenant stopped submitting); when serving (trailing_zero=False) they are treated like an
      interior gap, since the newest hours missing means a recorder outage, not zero demand.
    - Interior gaps of <= max_fill hours are forward filled (hourly peaks are step-like, so the
      last value is the best guess for a short outage of the recorder).
    - Longer interior gaps raise SeriesError naming the series and hour range: silently
      interpolating a day-long hole would teach the model a fake plateau.
    """
    out = np.array(values, dtype=np.float64, copy=True)
    for j in range(out.shape[1]):
        col = out[:, j]
        seen = np.flatnonzero(~np.isnan(col))
        if seen.size == 0:
            col[:] = 0.0
            continue
        first, last = int(seen[0]), int(seen[-1])
        col[:first] = 0.0
        if trailing_zero:
            col[last + 1 :] = 0.0
        holes = np.flatnonzero(np.isnan(col))
        if holes.size == 0:
            continue
        # group consecutive hole indices into runs
        breaks = np.flatnonzero(np.diff(holes) > 1)
        starts = np.concatenate(([holes[0]], holes[breaks + 1]))
        ends = np.concatenate((holes[breaks], [holes[-1]]))
        for s, e in zip(starts, ends, strict=True):
            length = int(e - s + 1)
            if length > max_fill:
                raise SeriesError(
                    f"series {keys[j]} has a gap of {length} h at hours {int(s)}..{int(e)} "
                    f"(longer than {max_fill} h): fix the input or fill it deliberately"
                )
            col[s : e + 1] = col[s - 1]
    if np.any(out < 0):
        raise SeriesError("negative demand in input")
    return out
