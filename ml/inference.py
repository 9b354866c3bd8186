"""Serving entry point: `load_forecaster(artifact_dir)` -> a Forecaster (services/core/forecast.py).

The simulator's `--forecast model` path imports this lazily, calls fit() daily (warm start, the
training code is imported only then) and predict() every 300 s. Loading imports no training code.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from gfs.ml.artifact import load_model
from gfs.ml.calibrated import CalibratedForecaster, Uncertainty
from gfs.ml.features import CalendarTable


def load_forecaster(artifact_dir: Path, *, start: datetime | None = None) -> CalibratedForecaster:
    """Load an artifact as a Forecaster.

    Hour index 0 of the series passed to fit/predict is taken to be `start`; by default the start
    of the series the artifact was trained on (2024-03-01 00:00 for `gfs trace demand` series, the
    simulator's origin). Pass `start` when serving a series with another origin, e.g. a
    Helios-trained artifact inside the simulator, so calendar features stay right.
    """
    model = load_model(Path(artifact_dir))
    if start is not None:
        model.start = start
        if hasattr(model, "cal"):
            model.cal = CalendarTable(start)
    if model.name == "orglinear":
        return CalibratedForecaster(model, uncertainty=Uncertainty.GAUSSIAN)
    return CalibratedForecaster(model)
