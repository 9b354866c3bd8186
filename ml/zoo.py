"""Build a fresh forecaster by name (explicit factory; nothing registers itself at import)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from gfs.ml.baselines import Ewma, LastValue, SeasonalNaive
from gfs.ml.calibrated import CalibratedForecaster, RawModel, Uncertainty
from gfs.ml.features import FeatureSpec
from gfs.ml.neural import IdMap, LstmModel, OrgLinearModel
from gfs.ml.series import SIMULATOR_ORIGIN, SeriesKey

MODEL_NAMES = ("lstm", "lstm-point", "orglinear", "last-value", "seasonal-naive", "ewma")
NEURAL = ("lstm", "orglinear")


class PointOnly:
    """Ablation: a model's point forecast with the baselines' calibration (raw q90 = point)."""

    def __init__(self, inner: RawModel, name: str) -> None:
        self.inner, self.name = inner, name

    @property
    def version(self) -> str:
        return self.inner.version

    @property
    def min_history(self) -> int:
        return self.inner.min_history

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None:
        self.inner.fit(keys, values, end_hour)

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        point, _ = self.inner.raw(keys, values, origins, horizon)
        return point, point


def orglinear_lookback(train_hours: int) -> int:
    """672 h as in the paper when the history allows it (plus a week of validation and a week of
    windows to train on), else 336 h (Helios: 31 days cannot hold 672 h + holdout)."""
    return 672 if train_hours >= 672 + 2 * 168 else 336


def build_forecaster(
    name: str,
    keys: Sequence[SeriesKey],
    *,
    start: datetime = SIMULATOR_ORIGIN,
    seed: int = 0,
    train_hours: int = 0,
    lookback: int | None = None,
    horizon: int = 4,
) -> CalibratedForecaster:
    tenants = IdMap.build([k[1] for k in keys])
    pools = IdMap.build([k[0] for k in keys])
    match name:
        case "lstm" | "lstm-point":
            spec = FeatureSpec(lookback=lookback or 168, horizon=horizon)
            lstm = LstmModel(spec=spec, tenants=tenants, pools=pools, start=start, seed=seed)
            return CalibratedForecaster(lstm if name == "lstm" else PointOnly(lstm, name))
        case "orglinear":
            lb = lookback or orglinear_lookback(train_hours)
            org = OrgLinearModel(
                lookback=lb, horizon=horizon, tenants=tenants, pools=pools, start=start, seed=seed
            )
            return CalibratedForecaster(org, uncertainty=Uncertainty.GAUSSIAN)
        case "last-value":
            return CalibratedForecaster(LastValue())
        case "seasonal-naive":
            return CalibratedForecaster(SeasonalNaive())
        case "ewma":
            return CalibratedForecaster(Ewma())
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")
