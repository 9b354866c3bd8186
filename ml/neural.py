"""Raw-model wrappers around the two networks: id maps, features, batched inference.

Training lives in ml/training.py and is imported only inside fit(), so loading an artifact for
inference never pulls the training code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import torch

from gfs.ml.calendar import calendar_index
from gfs.ml.features import CalendarTable, FeatureSpec, build_windows
from gfs.ml.forecast import Z90
from gfs.ml.networks import OrgLinear, QuantileLSTM
from gfs.ml.series import SIMULATOR_ORIGIN, SeriesKey
from gfs.ml.training_info import TrainingInfo

LSTM_VERSION = "lstm-q50q90-1"
ORGLINEAR_VERSION = "orglinear-1"
_CHUNK = 16384  # samples per forward pass, bounds memory on long backtests


@dataclass(slots=True)
class IdMap:
    """Fixed name -> index map stored in the artifact; 0 is 'unknown' (never reassigned)."""

    ids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, names: Sequence[str]) -> IdMap:
        return cls({n: i + 1 for i, n in enumerate(sorted(set(names)))})

    def lookup(self, names: Sequence[str]) -> np.ndarray:
        return np.array([self.ids.get(n, 0) for n in names], dtype=np.int64)

    @property
    def size(self) -> int:
        return len(self.ids)


class LstmModel:
    name = "lstm"

    def __init__(
        self,
        *,
        spec: FeatureSpec,
        tenants: IdMap,
        pools: IdMap,
        start: datetime = SIMULATOR_ORIGIN,
        hidden: int = 32,
        seed: int = 0,
    ) -> None:
        self.spec, self.tenants, self.pools, self.start, self.hidden = spec, tenants, pools, start, hidden
        torch.manual_seed(seed)
        self.net = QuantileLSTM(
            n_seq=spec.n_seq,
            n_static=spec.n_static,
            horizon=spec.horizon,
            n_tenants=tenants.size,
            n_pools=pools.size,
            hidden=hidden,
        )
        self.net.eval()
        self.cal = CalendarTable(start)
        self.info = TrainingInfo(seed=seed)
        self.shrink = np.ones(spec.horizon)  # per-horizon factor on the median change (training sets it)
        self.gap_scale = np.ones(spec.horizon)  # per-horizon factor on the q90 - q50 spread (ditto)
        self.train_config: Any = None  # gfs.ml.training.LstmTraining; None = its defaults

    @property
    def version(self) -> str:
        return f"{LSTM_VERSION}+fit{self.info.fits}@{self.info.trained_hours[1]}"

    @property
    def min_history(self) -> int:
        return self.spec.lookback

    def ids(self, keys: Sequence[SeriesKey]) -> tuple[np.ndarray, np.ndarray]:
        return self.tenants.lookup([k[1] for k in keys]), self.pools.lookup([k[0] for k in keys])

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None:
        from gfs.ml.training import train_lstm  # training code only when training

        train_lstm(self, keys, values, end_hour, self.train_config)

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if horizon > self.spec.horizon:
            raise ValueError(f"model forecasts {self.spec.horizon} h, asked for {horizon}")
        q = self.quantiles(keys, values, np.asarray(origins))  # [n_o, N, H, 2] in GPUs
        q = q[:, :, :horizon].transpose(0, 2, 1, 3)
        return q[..., 0], q[..., 1]

    def quantiles(self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray) -> np.ndarray:
        n_series = len(keys)
        w = build_windows(values, origins, self.spec, self.cal)
        tenant, pool = self.ids(keys)
        tenant_s = np.tile(tenant, len(origins))
        pool_s = np.tile(pool, len(origins))
        outs = []
        with torch.inference_mode():
            for s in range(0, len(w.last), _CHUNK):
                sl = slice(s, s + _CHUNK)
                out = self.net(
                    torch.from_numpy(w.seq[sl]),
                    torch.from_numpy(w.static[sl]),
                    torch.from_numpy(tenant_s[sl]),
                    torch.from_numpy(pool_s[sl]),
                )
                outs.append(out.numpy().astype(np.float64))
        rel = np.concatenate(outs) if outs else np.zeros((0, self.spec.horizon, 2))
        # Post-hoc guards from validation (ml/training.py _post_hoc): the median change is
        # shrunk toward persistence and the learned spread (q90 - q50) scaled, per horizon.
        gap = (rel[..., 1] - rel[..., 0]) * self.gap_scale[None, :]
        rel[..., 0] *= self.shrink[None, :]
        rel[..., 1] = rel[..., 0] + gap
        q = w.last[:, None, None] + rel * w.scale[:, None, None]
        return np.asarray(q.reshape(len(origins), n_series, self.spec.horizon, 2), dtype=np.float64)

    def config(self) -> dict[str, Any]:
        return {"hidden": self.hidden}


class OrgLinearModel:
    """The paper's OrgLinear (Gaussian head); calibrated the paper's way, not conformally."""

    name = "orglinear"

    def __init__(
        self,
        *,
        lookback: int,
        horizon: int,
        tenants: IdMap,
        pools: IdMap,
        start: datetime = SIMULATOR_ORIGIN,
        seed: int = 0,
    ) -> None:
        self.lookback, self.horizon, self.tenants, self.pools, self.start = (
            lookback,
            horizon,
            tenants,
            pools,
            start,
        )
        torch.manual_seed(seed)
        self.net = OrgLinear(
            lookback=lookback, horizon=horizon, class_dims=(pools.size + 1, 1, tenants.size + 1)
        )
        self.net.eval()
        self.info = TrainingInfo(seed=seed)
        self.train_config: Any = None  # gfs.ml.training.OrgLinearTraining; None = the paper's protocol

    @property
    def version(self) -> str:
        return f"{ORGLINEAR_VERSION}+fit{self.info.fits}@{self.info.trained_hours[1]}"

    @property
    def min_history(self) -> int:
        return self.lookback

    def class_ids(self, keys: Sequence[SeriesKey]) -> torch.Tensor:
        pools = self.pools.lookup([k[0] for k in keys])
        tenants = self.tenants.lookup([k[1] for k in keys])
        return torch.from_numpy(np.stack([pools, np.zeros_like(pools), tenants], axis=1))

    def time_ids(self, origins: np.ndarray) -> torch.Tensor:
        idx = calendar_index(self.start, np.asarray(origins))  # (hour, weekday, workday)
        return torch.from_numpy(idx[:, [2, 1, 0]].copy())  # (workday, weekday, hour) as the embeddings

    def inputs(self, values: np.ndarray, origins: np.ndarray) -> torch.Tensor:
        idx = np.asarray(origins)[:, None] + np.arange(-self.lookback, 0)[None, :]
        return torch.from_numpy(values[idx].transpose(0, 2, 1).astype(np.float32))  # [B, N, L]

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None:
        from gfs.ml.training import train_orglinear

        train_orglinear(self, keys, values, end_hour, self.train_config)

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if horizon > self.horizon:
            raise ValueError(f"model forecasts {self.horizon} h, asked for {horizon}")
        origins = np.asarray(origins)
        if origins.size and origins.min() < self.lookback:
            raise ValueError(f"origin {int(origins.min())} has less than {self.lookback} h of history")
        cls = self.class_ids(keys)
        mus, sigmas = [], []
        with torch.inference_mode():
            for s in range(0, len(origins), 512):
                o = origins[s : s + 512]
                mu, sigma = self.net(self.inputs(values, o), cls, self.time_ids(o))
                mus.append(mu.numpy().astype(np.float64))
                sigmas.append(sigma.numpy().astype(np.float64))
        mu = np.concatenate(mus)[:, :horizon]
        sigma = np.concatenate(sigmas)[:, :horizon]
        return mu, mu + Z90 * sigma

    def config(self) -> dict[str, Any]:
        return {"lookback": self.lookback, "horizon": self.horizon}
