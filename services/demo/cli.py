"""`gfs demo live` (the main job, `make demo`) and `gfs demo sim` (the simulator replay)."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Annotated

import typer

app = typer.Typer(help="Demos: the live system, or the simulator replay.", no_args_is_help=True)


@app.command("live")
def live(
    speed: Annotated[float, typer.Option(help="trace seconds per wall second")] = 120.0,
    settle_s: Annotated[float, typer.Option(help="keep watching after the replay ended")] = 30.0,
    max_s: Annotated[float, typer.Option(help="stop after this long in any case")] = 600.0,
) -> None:
    """The whole system (forecast, quota, preemption, 8 agents, 100 virtual nodes) replaying the
    bundled sample through Kafka; Ctrl-C stops everything the demo started."""
    from rich.console import Console

    from services.demo.live import run_demo

    raise typer.Exit(asyncio.run(run_demo(speed=speed, settle_s=settle_s, max_s=max_s, console=Console())))


@app.command("sim")
def sim() -> None:
    """The simulator replay of a synthetic trace over the real inventory (GFS vs FIFO)."""
    from services.platform.settings import REPO_ROOT

    raise typer.Exit(subprocess.call(["bash", str(REPO_ROOT / "scripts" / "demo-sim.sh")]))
