"""Artifact = weights.pt (a state_dict) + metadata.json. Reading it needs only ml/networks.py,
ml/features.py and ml/neural.py, never the training loop."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gfs.ml.calibration import CALIBRATION_HOURS
from gfs.ml.features import FeatureSpec
from gfs.ml.neural import IdMap, LstmModel, OrgLinearModel
from gfs.ml.training_info import TrainingInfo

FORMAT = "gfs-forecast-artifact/1"
WEIGHTS = "weights.pt"
METADATA = "metadata.json"


def _features(model: LstmModel | OrgLinearModel) -> dict[str, Any]:
    if isinstance(model, LstmModel):
        s = model.spec
        return {
            "lookback_hours": s.lookback,
            "seq_hours": s.seq_hours,
            "horizon_hours": s.horizon,
            "lags_hours": list(s.used_lags),
            "sequence": [
                "x/scale",
                "(x-last)/scale",
                "diff(x)/scale",
                "sin hour",
                "cos hour",
                "sin weekday",
                "cos weekday",
                "workday",
            ],
            "static": [
                "log1p(scale)",
                "lags (x[t+h-1-lag]-last)/scale",
                "calendar of target hours",
                "tenant embedding",
                "pool embedding",
            ],
            "normalisation": "per window: scale = max(1, mean of the lookback); targets (y-last)/scale",
            "target": "change from the last hourly peak; quantiles 0.5 and 0.9",
        }
    return {
        "lookback_hours": model.lookback,
        "horizon_hours": model.horizon,
        "inputs": [
            "raw hourly peaks (no scaling)",
            "calendar ids (workday, weekday, hour) at origin",
            "class ids (pool, cluster=0, tenant)",
        ],
        "normalisation": "none (as the paper's code)",
        "target": "Gaussian mu, sigma",
    }


def save_artifact(model: LstmModel | OrgLinearModel, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.net.state_dict(), out / WEIGHTS)
    info = model.info
    meta = {
        "format": FORMAT,
        "model": model.name,
        "version": model.version,
        "start": model.start.isoformat(),
        "config": model.config(),
        "features": _features(model),
        "tenants": model.tenants.ids,
        "pools": model.pools.ids,
        "shrink": [float(x) for x in getattr(model, "shrink", [])],
        "gap_scale": [float(x) for x in getattr(model, "gap_scale", [])],
        "calibration": {
            "lstm": (
                f"q90 = raw q90 + Q_(1-alpha)(residuals over the {CALIBRATION_HOURS} h before the origin); "
                "alpha per series and horizon from recent misses (ml/online.py), 0.1 when off"
            ),
            "orglinear": "Gaussian mu + 1.2816 sigma (paper)",
        }[model.name],
        "training": {
            "hours": list(info.trained_hours),
            "range": list(info.trained_range),
            "validation": info.validation,
            "fits": info.fits,
            "seed": info.seed,
        },
        "torch": torch.__version__,
    }
    (out / METADATA).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return out


def load_model(artifact_dir: Path) -> LstmModel | OrgLinearModel:
    meta_path = artifact_dir / METADATA
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: not a forecast artifact")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path}: unsupported format {meta.get('format')!r}")
    tenants, pools = IdMap(dict(meta["tenants"])), IdMap(dict(meta["pools"]))
    start = datetime.fromisoformat(meta["start"])
    feats, tr = meta["features"], meta["training"]
    model: LstmModel | OrgLinearModel
    if meta["model"] == "lstm":
        spec = FeatureSpec(
            lookback=feats["lookback_hours"],
            horizon=feats["horizon_hours"],
            lags=tuple(feats["lags_hours"]),
            seq_hours=feats["seq_hours"],
        )
        model = LstmModel(
            spec=spec,
            tenants=tenants,
            pools=pools,
            start=start,
            hidden=meta["config"]["hidden"],
            seed=tr["seed"],
        )
        model.shrink = np.array(meta["shrink"], dtype=np.float64)
        model.gap_scale = np.array(meta["gap_scale"], dtype=np.float64)
    elif meta["model"] == "orglinear":
        model = OrgLinearModel(
            lookback=feats["lookback_hours"],
            horizon=feats["horizon_hours"],
            tenants=tenants,
            pools=pools,
            start=start,
            seed=tr["seed"],
        )
    else:
        raise ValueError(f"{meta_path}: unknown model {meta['model']!r}")
    state = torch.load(artifact_dir / WEIGHTS, map_location="cpu", weights_only=True)
    model.net.load_state_dict(state)
    model.net.eval()
    model.info = TrainingInfo(
        trained_hours=(int(tr["hours"][0]), int(tr["hours"][1])),
        trained_range=(tr["range"][0], tr["range"][1]),
        validation=dict(tr["validation"]),
        fits=int(tr["fits"]),
        seed=int(tr["seed"]),
    )
    return model
