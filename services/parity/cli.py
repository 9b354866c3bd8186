"""`gfs parity run`: replay a trace through the live pipeline on the controllable clock and compare
its decisions with `gfs simulate --decisions` (services/parity/driver.py). Needs `make up`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from gfs.services.platform.paths import STATE_HELP, state_dir
from gfs.services.platform.settings import REPO_ROOT

app = typer.Typer(help="Sim/live parity on the controllable clock (needs `make up`).", no_args_is_help=True)

DEFAULT_TRACE = REPO_ROOT / "tests" / "data" / "parity"


@app.command("run")
def run(
    trace: Annotated[Path, typer.Option(help="a GFS-format trace directory")] = DEFAULT_TRACE,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help=f"logs, journals, both decision logs (default: <state>/parity, <state> = {STATE_HELP})"
        ),
    ] = None,
    quota_period_s: Annotated[float, typer.Option(help="quota refresh period (the simulator's)")] = 300.0,
    keep_schema: Annotated[bool, typer.Option(help="keep the run's Postgres schema")] = False,
) -> None:
    """Exit 0 when the live decision log equals the simulator's, 1 with the first difference."""
    from gfs.services.parity.driver import ParityOptions, run_parity

    workdir = (workdir or state_dir("parity")).absolute()
    typer.echo(f"logs, journals and decision logs: {workdir}", err=True)
    options = ParityOptions(
        trace_dir=trace, workdir=workdir, quota_period_s=quota_period_s, keep_schema=keep_schema,
        progress=typer.echo,
    )  # fmt: skip
    report = asyncio.run(run_parity(options))
    (workdir / "live-decisions.json").write_text(json.dumps(report.live.rows, indent=1, default=str))
    typer.echo(report.describe())
    raise typer.Exit(0 if report.diff.identical else 1)
