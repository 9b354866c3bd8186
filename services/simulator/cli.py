"""`gfs simulate`: replay a trace through one or more policies and write JSON + a report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from gfs.services.simulator.runner import ForecastSource, RunSettings, run_policies


def simulate(
    trace: Annotated[Path, typer.Option("--trace", help="trace directory")],
    policy: Annotated[list[str], typer.Option("--policy", help="policy name (repeatable)")],
    trace_format: Annotated[str, typer.Option("--format", help="trace format")] = "gfs",
    forecast: Annotated[
        ForecastSource, typer.Option("--forecast", help="HP-demand forecast source for the spot quota")
    ] = ForecastSource.PERSISTENCE,
    seed: Annotated[
        int, typer.Option("--seed", help="recorded with the results (the simulation is deterministic)")
    ] = 0,
    window_days: Annotated[
        float, typer.Option("--window-days", help="evaluation window: the last N days before its end")
    ] = 31.0,
    drain_days: Annotated[float, typer.Option("--drain-days", help="drain after the window")] = 7.0,
    window_end_s: Annotated[
        float | None,
        typer.Option(
            "--window-end-s",
            help="the evaluation window ends at S seconds (default: the trace horizon, the latest "
            "submit + duration); past the horizon, quota and preemption stay on while queued and "
            "evicted work finishes",
        ),
    ] = None,
    model_artifact: Annotated[
        Path | None, typer.Option("--model-artifact", help="artifact dir for --forecast model")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write metrics JSON here")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="write report.md + PNG plots here")] = None,
    decisions: Annotated[
        Path | None,
        typer.Option("--decisions", help="write every decision, in order, as JSON lines here"),
    ] = None,
    observed_demand: Annotated[
        Path | None,
        typer.Option(
            "--observed-demand",
            help="write each policy's observed HP-demand series to DIR/<policy>.csv "
            "(train the forecaster on it: gfs forecast train --series DIR/gfs.csv)",
        ),
    ] = None,
    quota_log: Annotated[
        Path | None,
        typer.Option(
            "--quota-log",
            help="write each policy's hourly quota inputs per pool (forecast quantile, HP floor, "
            "eta, spare, quota, what held the spot head, the reservation) to DIR/<policy>.csv",
        ),
    ] = None,
) -> None:
    """Simulate policies on a trace (HP warm-up, evaluation window, drain) and compare them."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gfs.services.simulator.traces.gfs_format import load_gfs_trace

    if forecast is ForecastSource.MODEL and model_artifact is None:
        raise typer.BadParameter("--forecast model needs --model-artifact DIR")
    if window_end_s is not None and not window_end_s > 0:
        raise typer.BadParameter(f"--window-end-s must be > 0, got {window_end_s}")
    if trace_format != "gfs":
        raise typer.BadParameter(f"unknown trace format {trace_format!r} (supported: gfs)")
    console = Console(stderr=True)
    started = time.perf_counter()
    loaded = load_gfs_trace(trace)
    console.print(
        f"loaded {len(loaded.jobs):,} jobs, {len(loaded.nodes):,} nodes in "
        f"{time.perf_counter() - started:.1f}s"
    )
    settings = RunSettings(
        forecast=forecast,
        seed=seed,
        window_days=window_days,
        drain_days=drain_days,
        model_artifact=model_artifact,
        window_end_s=window_end_s,
    )
    end = loaded.horizon_s if window_end_s is None else window_end_s
    horizon = end + drain_days * 86400.0
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("day {task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        tasks = {name: bar.add_task(f"{name:>12}", total=horizon / 86400.0) for name in policy}

        def progress(name: str, t: float) -> None:
            bar.update(tasks[name], completed=t / 86400.0)

        result = run_policies(loaded, policy, settings, progress, decisions, observed_demand, quota_log)
        for name in policy:
            bar.update(tasks[name], completed=horizon / 86400.0)
    payload = result.to_json()
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    if report is not None:
        from gfs.services.simulator.report import write_report

        write_report(result, report)
    from gfs.services.simulator.report import markdown_table

    console.print(markdown_table(result))
