"""`gfs whatif`: what the last days of the live log would have looked like under another policy."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gfs.services.platform.cli_output import Output, OutputOption, echo_json


def whatif(
    since: Annotated[str, typer.Option("--since", help="how far back the log is read: 7d, 12h, 30m")] = "7d",
    policy: Annotated[
        list[str] | None, typer.Option("--policy", help="a policy to compare (repeatable; default fifo)")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="a quota setting for the compared policies, KEY=VALUE (repeatable), e.g. p=0.95"
        ),
    ] = None,
    price: Annotated[
        list[str] | None,
        typer.Option("--price", help="USD per GPU-hour of a pool, POOL=USD (repeatable), e.g. A100=2.5"),
    ] = None,
    pool: Annotated[
        list[str] | None, typer.Option("--pool", help="only this pool (GPU model; repeatable; default all)")
    ] = None,
    output: OutputOption = Output.table,
    as_json: Annotated[bool, typer.Option("--json", help="the same as --output json")] = False,
) -> None:
    """Rebuild the trace from the live topics, replay it in the simulator under GFS and the asked
    policies, and compare with what happened (docs/operations.md, "What if")."""
    from gfs.services.platform.settings import PlatformSettings
    from gfs.services.whatif.log_reader import parse_since, read_log
    from gfs.services.whatif.money import parse_prices
    from gfs.services.whatif.rebuild import rebuild
    from gfs.services.whatif.replay import quota_settings
    from gfs.services.whatif.report import what_if

    try:
        window = parse_since(since)
        prices = parse_prices(price or [])
        settings = quota_settings(set_ or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    names = policy or ["fifo"]
    from gfs.services.core.policies.registry import build_registry

    unknown = sorted(set(names) - set(build_registry()))
    if unknown:
        raise typer.BadParameter(
            f"unknown policy {', '.join(unknown)}; known: {', '.join(sorted(build_registry()))}"
        )
    log = asyncio.run(read_log(PlatformSettings().bootstrap_servers, window))
    rebuilt = rebuild(log.records, pool)
    if log.undecodable:
        rebuilt.left_out["undecodable records"] = log.undecodable
    try:
        result = what_if(rebuilt, names, settings, prices, labels=set_ or [])
    except ValueError as exc:
        typer.echo(f"gfs whatif: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json or output is Output.json:
        echo_json(result.to_json())
    else:
        typer.echo(result.describe())
