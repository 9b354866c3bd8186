"""`gfs quota show`: the spot quota in force per pool, read from the quota service's SRE API
(`/quotas`, its contract in api_spec.py), as a table or, with `-o json`, the API's JSON as is.

Only the standard library and typer at import: the command runs from an SRE's laptop against a
port-forwarded API without the service's own dependencies loaded.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

from gfs.services.platform.cli_output import Output, OutputOption, echo_json

app = typer.Typer(no_args_is_help=True, help="The spot quota in force (the quota service's SRE API).")


def _fetch(api: str) -> dict[str, Any]:
    url = f"{api.rstrip('/')}/quotas"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            found: dict[str, Any] = json.loads(response.read())
            return found
    except (urllib.error.URLError, OSError, ValueError) as exc:
        typer.echo(f"error: the quota service's API at {url} did not answer: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command("show")
def show(
    api: Annotated[str, typer.Option(help="the quota service's SRE API")] = "http://127.0.0.1:8081",
    pool: Annotated[list[str] | None, typer.Option(help="only these pools (repeatable)")] = None,
    output: OutputOption = Output.table,
) -> None:
    """The latest quota per pool: GPUs per guarantee duration, eta, version, the forecast behind it."""
    quotas = _fetch(api)
    if pool:
        quotas = {name: q for name, q in quotas.items() if name in pool}
    if output is Output.json:
        echo_json(quotas)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"spot quota ({api})")
    for column in (
        "pool",
        "quota GPUs (guarantee h: GPUs)",
        "eta",
        "capacity",
        "version",
        "valid until",
        "forecast",
    ):
        table.add_column(column)
    for name, q in sorted(quotas.items()):
        forecast = q.get("forecast")
        used = "none (idle fallback)" if forecast is None else forecast["version"]
        if forecast is not None and forecast.get("fallback"):
            used += " (fallback)"
        table.add_row(
            name,
            ", ".join(f"{h}h: {g:g}" for h, g in q["quota_gpus"].items()),
            f"{q['eta']:.3g}",
            str(q["capacity_gpus"]),
            str(q["version"]),
            q["valid_until"],
            used,
        )
    Console(width=200).print(table)
