"""`gfs schemas openapi`: write (or --check) the checked-in OpenAPI documents of the services'
HTTP APIs, docs/api/<service>.openapi.json, from their contracts (each service's api_spec.py).

Mounted beside `gfs schemas protocol` by cli.py: the contracts live in the service packages, which
services/platform (where `gfs schemas` lives) does not import. The same documents are served at
each API's /openapi.json.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated

import typer

from gfs.services.platform.openapi import Api, render

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs" / "api"
# service -> the module whose `API` is its contract
CONTRACTS: dict[str, str] = {
    "preemption": "gfs.services.preemption.sre.api_spec",
    "quota": "gfs.services.quota.api_spec",
    "forecast": "gfs.services.forecast.api_spec",
    "node-agent": "gfs.services.node_agent.api_spec",
}


def contract(service: str) -> Api:
    api: Api = importlib.import_module(CONTRACTS[service]).API
    return api


def openapi(
    directory: Annotated[Path, typer.Option(help="Where the <service>.openapi.json files go.")] = DOCS_DIR,
    check: Annotated[bool, typer.Option("--check", help="Only compare; exit 1 if one is stale.")] = False,
) -> None:
    """Write (or --check) docs/api/<service>.openapi.json from the services' API contracts."""
    stale = []
    for service in CONTRACTS:
        path = directory / f"{service}.openapi.json"
        expected = render(contract(service))
        if check:
            if not path.exists() or path.read_text() != expected:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected)
        typer.echo(f"wrote {path}")
    if check:
        if stale:
            for path in stale:
                typer.echo(f"{path} is out of date; run `gfs schemas openapi`", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"{directory}: every OpenAPI document matches its service's contract")
