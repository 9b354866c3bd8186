"""`gfs forecast`: train, backtest and benchmark the per-tenant GPU demand forecasters.

torch and the training code load inside the commands, so mounting this sub-app is cheap.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Per-tenant GPU demand forecasting: train, backtest, bench.")

SeriesOpt = Annotated[
    Path, typer.Option(help="helios-earth folder or canonical CSV (time,tenant,pool,demand_gpus)")
]
ThreadsOpt = Annotated[int, typer.Option(help="torch CPU threads (the machine is shared)")]


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))


@app.command()
def train(
    series: SeriesOpt,
    out: Annotated[Path, typer.Option(help="artifact directory (weights.pt + metadata.json)")],
    model: Annotated[str, typer.Option(help="lstm | orglinear")] = "lstm",
    seed: Annotated[int, typer.Option()] = 0,
    lookback: Annotated[
        int | None, typer.Option(help="hours; default 168 (lstm), 672 or 336 (orglinear)")
    ] = None,
    threads: ThreadsOpt = 1,
) -> None:
    """Train on the whole series (newest quarter, at most 7 days, validates) and save an artifact."""
    from gfs.ml.artifact import save_artifact
    from gfs.ml.datasets import load_series
    from gfs.ml.zoo import NEURAL, build_forecaster

    if model not in NEURAL:
        raise typer.BadParameter(f"--model must be one of {', '.join(NEURAL)}")
    _threads(threads)
    data = load_series(series)
    f = build_forecaster(
        model, data.keys, start=data.start, seed=seed, train_hours=data.hours, lookback=lookback
    )
    started = time.perf_counter()
    f.fit(data.keys, data.values, data.hours)
    path = save_artifact(f.model, out)  # type: ignore[arg-type]
    typer.echo(
        f"trained {f.version} on {len(data.keys)} series x {data.hours} h in "
        f"{time.perf_counter() - started:.1f} s -> {path}"
    )
    typer.echo(json.dumps(f.model.info.validation))  # type: ignore[attr-defined]


@app.command()
def backtest(
    series: SeriesOpt,
    json_out: Annotated[Path, typer.Option("--json", help="write the results here")],
    holdout_days: Annotated[int, typer.Option()] = 7,
    models: Annotated[
        str, typer.Option(help="comma-separated")
    ] = "lstm,orglinear,last-value,seasonal-naive,ewma",
    seed: Annotated[int, typer.Option()] = 0,
    threads: ThreadsOpt = 1,
) -> None:
    """Train before the last HOLDOUT_DAYS, freeze, forecast every holdout hour at horizons 1-4."""
    from gfs.ml.backtest import run_backtest
    from gfs.ml.datasets import load_series
    from gfs.ml.report import table

    _threads(threads)
    data = load_series(series)
    names = [m.strip() for m in models.split(",") if m.strip()]
    result = run_backtest(data, names, holdout_days=holdout_days, seed=seed, log=typer.echo)
    result["series"]["path"] = str(series)  # type: ignore[index]
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(result, indent=2, sort_keys=True))
    typer.echo(table(result))
    typer.echo(f"wrote {json_out}")


@app.command()
def coverage(
    series: SeriesOpt,
    artifact: Annotated[
        Path | None, typer.Option(help="LSTM artifact; its tenants are 'seen' (none: last-value only)")
    ] = None,
    baseline: Annotated[bool, typer.Option(help="also report last-value")] = True,
    online: Annotated[
        str, typer.Option(help="both | on | off: online recalibration (ml/online.py)")
    ] = "both",
    start_hour: Annotated[
        int | None, typer.Option(help="first target hour; default lookback + the 168 h calibration window")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the reports here")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="write the tables here")] = None,
    threads: ThreadsOpt = 1,
    output: Annotated[
        str, typer.Option("--output", "-o", help="table (for people) or json (one document on stdout)")
    ] = "table",
) -> None:
    """P90 coverage per pool and per tenant, seen vs unseen by the artifact, before/after online
    recalibration. The models stay frozen; every hour from START_HOUR on is forecast at 1-4 h."""
    from gfs.ml.baselines import LastValue
    from gfs.ml.calibrated import CalibratedForecaster
    from gfs.ml.calibration import CALIBRATION_HOURS
    from gfs.ml.coverage import coverage_report, markdown
    from gfs.ml.datasets import load_series
    from gfs.ml.inference import load_forecaster
    from gfs.ml.online import DEFAULT_ONLINE

    # The --output convention of services/platform/cli_output.py (ml imports nothing of services).
    if output not in ("table", "json"):
        raise typer.BadParameter(f"--output must be table or json (got {output!r})")
    modes = {"both": (False, True), "on": (True,), "off": (False,)}.get(online)
    if modes is None:
        raise typer.BadParameter("--online must be both, on or off")
    if artifact is None and not baseline:
        raise typer.BadParameter("nothing to report: give --artifact or keep --baseline")
    _threads(threads)
    data = load_series(series)
    models: list[tuple[str, CalibratedForecaster, set[str]]] = []
    if artifact is not None:
        lstm = load_forecaster(artifact, start=data.start)  # calendar of the series served
        ids = getattr(lstm.model, "tenants", None)  # LstmModel / OrgLinearModel: the trained id map
        seen = set(ids.ids) if ids is not None else set()
        models.append(("lstm", lstm, seen))
    if baseline:
        models.append(("last-value", CalibratedForecaster(LastValue()), set()))
    start = start_hour if start_hour is not None else max(m.model.min_history for _, m, _ in models)
    start += CALIBRATION_HOURS if start_hour is None else 0
    if not 0 < start < data.hours:
        raise typer.BadParameter(f"start hour {start} outside the series' {data.hours} h")
    reports = {}
    for name, f, seen_names in models:
        for on in modes:
            g = CalibratedForecaster(
                f.model, uncertainty=f.uncertainty, online=DEFAULT_ONLINE if on else None
            )
            label = f"{name} + online" if on else name
            reports[label] = coverage_report(g, data, start, lambda t, s=seen_names: t in s)  # type: ignore[misc]
            typer.echo(f"{label}: done", err=output == "json")  # stdout holds only the JSON then
    text = markdown(reports)
    payload = {
        "series": str(series),
        "artifact": str(artifact),
        "online": str(DEFAULT_ONLINE),
        "reports": reports,
    }
    typer.echo(json.dumps(payload, indent=2, sort_keys=True) if output == "json" else text)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(payload, indent=2, sort_keys=True))
    if markdown_out:
        markdown_out.parent.mkdir(parents=True, exist_ok=True)
        markdown_out.write_text(text + "\n")


@app.command()
def bench(
    series: SeriesOpt,
    tenants: Annotated[int, typer.Option(help="series in the latency test")] = 100,
    history_days: Annotated[int, typer.Option(help="history for the warm-start retrain")] = 28,
    threads: ThreadsOpt = 1,
    json_out: Annotated[Path | None, typer.Option("--json")] = None,
) -> None:
    """LSTM inference latency (TENANTS x 4 h) and a daily warm-start retrain on HISTORY_DAYS."""
    from gfs.ml.bench import run_bench
    from gfs.ml.datasets import load_series

    _threads(threads)
    result = run_bench(load_series(series), n_tenants=tenants, history_days=history_days)
    for k, v in result.items():
        typer.echo(f"{k}: {v}")
    if json_out:
        json_out.write_text(json.dumps(result, indent=2))
