"""`gfs faults run`: kill -9 every service at random moments and stop the broker and Postgres
under load, then check no task was lost, evicted twice or run twice (services/faults/harness.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from gfs.services.platform.paths import STATE_HELP, state_dir

app = typer.Typer(help="Fault injection against the live pipeline (needs `make up`).", no_args_is_help=True)


@app.command("run")
def run(
    kills: Annotated[
        int, typer.Option(help="kill -9 per service (forecast, quota, preemption, an agent)")
    ] = 5,
    outage_s: Annotated[float, typer.Option(help="broker and Postgres outage length (0: none)")] = 30.0,
    outage_of: Annotated[
        list[str], typer.Option(help="what goes down, one after the other: broker, postgres (repeatable)")
    ] = ["broker", "postgres"],  # noqa: B006 (typer reads the default; it is never mutated)
    node_timeout_s: Annotated[
        float,
        typer.Option(help="the preemption service's node timeout (an outage longer than it evicts nothing)"),
    ] = 60.0,
    load_s: Annotated[float, typer.Option(help="length of the loaded window the faults fall in")] = 300.0,
    rate: Annotated[float, typer.Option(help="task submissions per second")] = 0.4,
    agents: Annotated[int, typer.Option(help="node agents (fake GPUs)")] = 3,
    gpus_per_agent: Annotated[int, typer.Option(help="fake GPUs per agent")] = 4,
    seed: Annotated[int, typer.Option()] = 0,
    soak: Annotated[
        float,
        typer.Option(
            help="a soak run of this many seconds: steady load, the preemption service killed every "
            "--kill-every-s, the --outage-of parts down for --outage-s each in its first quarter; prints "
            "RSS, lag, journal rows, failover and outage recovery per interval"
        ),
    ] = 0.0,
    kill_every_s: Annotated[
        float, typer.Option(help="soak: seconds between preemption kills (0: none)")
    ] = 600.0,
    sample_s: Annotated[float, typer.Option(help="soak: seconds between samples")] = 60.0,
    report_every_s: Annotated[float, typer.Option(help="soak: seconds per report interval")] = 3600.0,
    workdir: Annotated[
        Path | None,
        typer.Option(help=f"logs, journals and the report (default: <state>/faults, <state> = {STATE_HELP})"),
    ] = None,
) -> None:
    """The full fault run (defaults: 5 kills per service, 30-s outages, 5 minutes of load), or with
    --soak a long steady run (`gfs faults run --soak 3600`)."""
    from gfs.services.faults.harness import run_faults
    from gfs.services.faults.plan import FaultPlan

    unknown = set(outage_of) - {"broker", "postgres"}
    if unknown:
        raise typer.BadParameter(f"--outage-of takes broker or postgres, not {sorted(unknown)}")
    plan = FaultPlan(
        kills_per_service=kills,
        outage_s=outage_s,
        outage_of=tuple(outage_of),
        node_timeout_s=node_timeout_s,
        load_s=load_s,
        rate=rate,
        agents=agents,
        gpus_per_agent=gpus_per_agent,
        seed=seed,
        soak_s=soak,
        kill_every_s=kill_every_s,
        sample_s=sample_s,
        report_every_s=report_every_s,
    )
    workdir = (workdir or state_dir("faults")).absolute()
    typer.echo(f"logs, journals and the report: {workdir}", err=True)
    report = asyncio.run(run_faults(plan, workdir=workdir))
    if report.soak:
        from gfs.services.faults.soak import render

        typer.echo(render(report.soak), err=True)
    text = json.dumps(report.as_dict(), indent=2, default=str)
    (workdir / "report.json").write_text(text)
    typer.echo(text)
    raise typer.Exit(0 if report.ok else 1)
