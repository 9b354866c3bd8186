"""Training loops for the LSTM and OrgLinear raw models (seeded, early stopping, warm start).

Both hold out the last 7 days of the given history as a validation split for early stopping and
model selection, so nothing after `end_hour` is touched and the backtest's holdout never steers a
choice. CPU by default; CUDA is used when present.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import numpy as np
import torch

from gfs.ml.features import CalendarTable, FeatureSpec, build_windows, targets
from gfs.ml.networks import OrgLinear, QuantileLSTM
from gfs.ml.series import SeriesError, SeriesKey
from gfs.ml.training_info import TrainingInfo


class LstmModel(Protocol):
    """What LSTM training reads and sets of gfs.ml.neural.LstmModel (which calls it from `fit`): the
    model classes import this module, so this module names them only by their shape."""

    spec: FeatureSpec
    net: QuantileLSTM
    cal: CalendarTable
    info: TrainingInfo
    shrink: np.ndarray
    gap_scale: np.ndarray
    start: datetime

    def ids(self, keys: Sequence[SeriesKey]) -> tuple[np.ndarray, np.ndarray]: ...

    def quantiles(self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray) -> np.ndarray: ...


class OrgLinearModel(Protocol):
    """The same for gfs.ml.neural.OrgLinearModel."""

    lookback: int
    horizon: int
    net: OrgLinear
    info: TrainingInfo
    start: datetime

    def class_ids(self, keys: Sequence[SeriesKey]) -> torch.Tensor: ...

    def time_ids(self, origins: np.ndarray) -> torch.Tensor: ...

    def inputs(self, values: np.ndarray, origins: np.ndarray) -> torch.Tensor: ...


VAL_HOURS = 168
MIN_VAL_HOURS = 48
SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
GAP_GRID = (0.0, 0.5, 1.0)


class _EarlyStopping:
    """Keeps the best weights by validation loss and says when `patience` epochs brought nothing.

    Without validation data every epoch's weights count as the best (training runs all epochs).
    """

    def __init__(self, net: torch.nn.Module, patience: int) -> None:
        self.net, self.patience = net, patience
        self.best, self.bad = float("inf"), 0
        self.best_state = copy.deepcopy(net.state_dict())

    def keep_last(self) -> None:
        self.best_state = copy.deepcopy(self.net.state_dict())

    def should_stop(self, val_loss: float) -> bool:
        if val_loss < self.best - 1e-6:
            self.best, self.bad = val_loss, 0
            self.keep_last()
            return False
        self.bad += 1
        return self.bad >= self.patience

    def restore(self) -> None:
        self.net.load_state_dict(self.best_state)


@dataclass(frozen=True, slots=True)
class LstmTraining:
    max_epochs: int = 60
    patience: int = 6
    warm_max_epochs: int = 8
    warm_patience: int = 3
    warm_history: int = 672  # a warm daily retrain looks at the last 28 days only
    lr: float = 3e-3
    warm_lr: float = 1e-3
    batch: int = 128
    samples_per_epoch: int = 4096
    max_windows: int = 65536  # (origin, series) windows materialised for training
    weight_decay: float = 1e-2
    id_dropout: float = 0.2  # share of samples whose tenant/pool id is replaced by 'unknown'


@dataclass(frozen=True, slots=True)
class OrgLinearTraining:
    """The paper code's protocol (spec 3.2)."""

    max_epochs: int = 10
    patience: int = 3
    lr: float = 4e-5
    batch: int = 32


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _split(first: int, end_hour: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation origins; targets of both stay below end_hour, and train targets stay
    below the first validation target (no overlap).

    Validation is the newest quarter of the origins, between 2 and 7 days: on a month of data
    (Helios) a full week would leave the network too few windows to learn from.
    """
    last = end_hour - horizon  # origin + horizon - 1 < end_hour
    if last < first:
        raise SeriesError(f"history of {end_hour} h is too short to train (need > {first + horizon} h)")
    n_val = min(VAL_HOURS, (last - first + 1) // 4)
    if n_val >= MIN_VAL_HOURS:
        val_start = last - n_val + 1
        return np.arange(first, val_start - horizon + 1), np.arange(val_start, last + 1)
    return np.arange(first, last + 1), np.zeros(0, dtype=np.int64)


def _pinball(pred: torch.Tensor, y: torch.Tensor, q: float) -> torch.Tensor:
    d = y - pred
    return torch.maximum(q * d, (q - 1.0) * d)


def train_lstm(
    model: LstmModel,
    keys: Sequence[SeriesKey],
    values: np.ndarray,
    end_hour: int,
    cfg: LstmTraining | None = None,
) -> dict[str, float]:
    cfg = cfg or LstmTraining()
    warm = model.info.fits > 0
    seed = model.info.seed + model.info.fits
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    spec = model.spec
    first = spec.lookback
    if warm:
        first = max(first, end_hour - cfg.warm_history)
    if warm and end_hour - first < spec.horizon + MIN_VAL_HOURS:
        return {}  # a trained model keeps its weights rather than retrain on a sliver of history
    train_o, val_o = _split(first, end_hour, spec.horizon)
    n = len(keys)
    # Bound memory and epoch cost on long, wide histories (184 days x 131 series = 500k windows):
    # keep a seeded random subset of origins, every series at each.
    cap = max(1, cfg.max_windows // n)
    if len(train_o) > cap:
        train_o = np.sort(rng.choice(train_o, cap, replace=False))
    if len(val_o) > cap:
        val_o = np.sort(rng.choice(val_o, cap, replace=False))
    tenant, pool = model.ids(keys)

    def tensors(origins: np.ndarray) -> tuple[torch.Tensor, ...]:
        w = build_windows(values, origins, spec, model.cal)
        y = targets(values, origins, spec.horizon).transpose(0, 2, 1).reshape(-1, spec.horizon)
        rel = (y - w.last[:, None]) / w.scale[:, None]
        # Weight by scale so the loss is in GPUs, like the metrics the quota cares about; the
        # inputs stay scale-free so the network transfers across tenant sizes.
        weight = w.scale / w.scale.mean()
        return (
            torch.from_numpy(w.seq),
            torch.from_numpy(w.static),
            torch.from_numpy(np.tile(tenant, len(origins))),
            torch.from_numpy(np.tile(pool, len(origins))),
            torch.from_numpy(rel.astype(np.float32)),
            torch.from_numpy(weight.astype(np.float32)),
        )

    dev = _device()
    train = [t.to(dev) for t in tensors(train_o)]
    val = [t.to(dev) for t in tensors(val_o)] if len(val_o) else None
    net = model.net.to(dev)
    opt = torch.optim.AdamW(
        net.parameters(), lr=cfg.warm_lr if warm else cfg.lr, weight_decay=cfg.weight_decay
    )
    max_epochs, patience = (
        (cfg.warm_max_epochs, cfg.warm_patience) if warm else (cfg.max_epochs, cfg.patience)
    )

    def loss_of(batch: Sequence[torch.Tensor]) -> torch.Tensor:
        seq, static, ten, pl, y, wt = batch
        out = net(seq, static, ten, pl)
        loss = _pinball(out[..., 0], y, 0.5) + _pinball(out[..., 1], y, 0.9)
        return (loss.mean(dim=1) * wt).mean()

    stopper, t0 = _EarlyStopping(net, patience), time.perf_counter()
    size = len(train[0])
    for _epoch in range(max_epochs):
        net.train()
        order = torch.from_numpy(rng.permutation(size)[: cfg.samples_per_epoch]).to(dev)
        for s in range(0, len(order), cfg.batch):
            idx = order[s : s + cfg.batch]
            seq, static, ten, pl, y, wt = (t[idx] for t in train)
            mask = torch.from_numpy(rng.random(len(idx)) < cfg.id_dropout).to(dev)
            ten = torch.where(mask, torch.zeros_like(ten), ten)
            pl = torch.where(mask, torch.zeros_like(pl), pl)
            opt.zero_grad()
            loss = loss_of((seq, static, ten, pl, y, wt))
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves backward untyped
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        if val is None:
            stopper.keep_last()
            continue
        net.eval()
        with torch.no_grad():
            v = float(loss_of(val))
        if stopper.should_stop(v):
            break
    stopper.restore()
    model.net = net.cpu().eval()
    metrics = {
        "train_s": time.perf_counter() - t0,
        "val_loss_scaled": stopper.best if val is not None else float("nan"),
    }
    if len(val_o):
        metrics |= _post_hoc(model, keys, values, val_o)
    _record(model, int(train_o[0]), end_hour, metrics, n_series=n)
    return metrics


def train_orglinear(
    model: OrgLinearModel,
    keys: Sequence[SeriesKey],
    values: np.ndarray,
    end_hour: int,
    cfg: OrgLinearTraining | None = None,
) -> dict[str, float]:
    cfg = cfg or OrgLinearTraining()
    seed = model.info.seed + model.info.fits
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if model.info.fits > 0 and end_hour - model.lookback < model.horizon + MIN_VAL_HOURS:
        return {}  # as train_lstm: keep the trained weights
    train_o, val_o = _split(model.lookback, end_hour, model.horizon)
    dev = _device()
    net = model.net.to(dev)
    cls = model.class_ids(keys).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)

    def nll(origins: np.ndarray) -> torch.Tensor:
        x = model.inputs(values, origins).to(dev)
        y = torch.from_numpy(targets(values, origins, model.horizon).astype(np.float32)).to(dev)
        mu, sigma = net(x, cls, model.time_ids(origins).to(dev))
        mask = y != 0  # the paper masks zero targets (spec 3.2, 8 #12)
        ll: torch.Tensor = torch.distributions.Normal(mu, sigma).log_prob(y)  # type: ignore[no-untyped-call]
        loss: torch.Tensor = -(ll * mask).sum() / mask.sum().clamp(min=1)
        return loss

    stopper, t0 = _EarlyStopping(net, cfg.patience), time.perf_counter()
    for epoch in range(cfg.max_epochs):
        for g in opt.param_groups:  # "type1": halve every 3 epochs
            g["lr"] = cfg.lr * 0.5 ** (epoch // 3)
        net.train()
        order = rng.permutation(train_o)
        for s in range(0, len(order), cfg.batch):
            opt.zero_grad()
            loss = nll(order[s : s + cfg.batch])
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
        if not len(val_o):
            stopper.keep_last()
            continue
        net.eval()
        with torch.no_grad():
            v = float(nll(val_o))
        if stopper.should_stop(v):
            break
    stopper.restore()
    model.net = net.cpu().eval()
    metrics = {"train_s": time.perf_counter() - t0, "val_nll": stopper.best}
    _record(model, int(train_o[0]), end_hour, metrics, n_series=len(keys))
    return metrics


def _post_hoc(
    model: LstmModel, keys: Sequence[SeriesKey], values: np.ndarray, val_o: np.ndarray
) -> dict[str, float]:
    """Per-horizon guards chosen on the validation split (never the holdout).

    1. Shrink the predicted median change toward persistence by the factor with the lowest MAE:
       with a month of data the network's median can be noisier than "no change".
    2. Scale the learned spread (q90 - q50) by the factor whose *calibrated* q90 has the lowest
       pinball loss, with each series' shift fitted on the validation cells themselves (the same
       in-sample shift for every candidate, so only the spread's shape is compared). Factor 0 is
       the baselines' "point + residual quantile".
    """
    h_count = model.spec.horizon
    model.shrink, model.gap_scale = np.ones(h_count), np.ones(h_count)
    q = model.quantiles(keys, values, val_o)  # [n_o, N, H, 2]
    y = targets(values, val_o, h_count).transpose(0, 2, 1)
    last = values[val_o - 1]
    out: dict[str, float] = {}
    for h in range(h_count):
        change = q[..., h, 0] - last
        mae = {lam: float(np.abs(last + lam * change - y[..., h]).mean()) for lam in SHRINK_GRID}
        model.shrink[h] = min(mae, key=lambda lam: (mae[lam], -lam))
        q50 = last + model.shrink[h] * change
        gap = q[..., h, 1] - q[..., h, 0]
        loss = {}
        for mu in GAP_GRID:
            raw = q50 + mu * gap
            shift = np.quantile(y[..., h] - raw, 0.9, axis=0)
            loss[mu] = float(_np_pinball(raw + shift, y[..., h], 0.9).mean())
        model.gap_scale[h] = min(loss, key=lambda mu: (loss[mu], -mu))
        out |= {f"shrink_h{h + 1}": float(model.shrink[h]), f"gap_scale_h{h + 1}": float(model.gap_scale[h])}
    q = model.quantiles(keys, values, val_o)
    out["val_mae"] = float(np.abs(q[..., 0] - y).mean())
    out["val_pinball_p90_raw"] = float(_np_pinball(q[..., 1], y, 0.9).mean())
    out["val_persistence_mae"] = float(np.abs(last[:, :, None] - y).mean())
    return out


def _np_pinball(pred: np.ndarray, y: np.ndarray, q: float) -> np.ndarray:
    d = y - pred
    return np.asarray(np.maximum(q * d, (q - 1.0) * d), dtype=np.float64)


def _record(
    model: LstmModel | OrgLinearModel, first: int, end_hour: int, metrics: dict[str, float], *, n_series: int
) -> None:
    info = model.info
    info.fits += 1
    info.trained_hours = (first, end_hour)
    info.trained_range = (
        (model.start + timedelta(hours=first)).isoformat(),
        (model.start + timedelta(hours=end_hour)).isoformat(),
    )
    info.validation = {k: round(float(v), 6) for k, v in metrics.items()} | {"n_series": float(n_series)}
