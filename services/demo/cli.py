"""`gfs demo live` (the main job, `make demo`) and `gfs demo sim` (the simulator replay)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Demos: the live system, or the simulator replay.", no_args_is_help=True)


@app.command("live")
def live(
    speed: Annotated[float, typer.Option(help="trace seconds per wall second")] = 480.0,
    clock: Annotated[
        str,
        typer.Option(
            help="accelerated: the services on the demo's controllable clock (the LSTM forecasts); "
            "wall: the wall clock, as in production (no forecast hour closes in a demo)"
        ),
    ] = "accelerated",
    settle_s: Annotated[float, typer.Option(help="keep watching after the replay ended")] = 30.0,
    max_s: Annotated[float, typer.Option(help="stop after this long in any case")] = 600.0,
    sample: Annotated[
        Path | None, typer.Option(help="GFS-format trace to replay (default: the bundled demo/sample)")
    ] = None,
    preemption_port: Annotated[
        int, typer.Option(help="the preemption service's SRE API and dashboard")
    ] = 8082,
    quota_port: Annotated[int, typer.Option(help="the quota service's SRE API")] = 8081,
    forecast_port: Annotated[int, typer.Option(help="the forecast service's web port")] = 6066,
    agent_metrics_port: Annotated[
        int, typer.Option(help="the first of the 8 agents' metrics ports (Prometheus scrapes 9101-9110)")
    ] = 9101,
) -> None:
    """The whole system (forecast, quota, preemption, 8 agents, 100 virtual nodes) replaying the
    bundled sample through Kafka; Ctrl-C stops everything the demo started. Logs, pids and the
    report go to <state>/runs/demo-live-<run>/ (<state>: $GFS_STATE_DIR, else
    $XDG_STATE_HOME/gfs, else ~/.local/state/gfs)."""
    from rich.console import Console

    from gfs.services.demo.live import SAMPLE, run_demo

    ports = {"preemption": preemption_port, "quota": quota_port, "forecast": forecast_port}
    raise typer.Exit(
        asyncio.run(
            run_demo(
                speed=speed,
                settle_s=settle_s,
                max_s=max_s,
                console=Console(),
                sample=sample or SAMPLE,
                ports=ports,
                agent_metrics_port=agent_metrics_port,
                clock=clock,
            )
        )
    )


@app.command("sim")
def sim() -> None:
    """The simulator replay of a synthetic trace over the real inventory (GFS vs FIFO). Outputs
    go to $GFS_DEMO_OUT (default <state>/runs/demo; <state>: $GFS_STATE_DIR, else
    $XDG_STATE_HOME/gfs, else ~/.local/state/gfs)."""
    from gfs.services.platform.settings import REPO_ROOT

    raise typer.Exit(subprocess.call(["bash", str(REPO_ROOT / "scripts" / "demo-sim.sh")]))
