"""`gfs serve SERVICE`: run one live service in the foreground until SIGINT/SIGTERM.

Each command imports its service inside the function, so `gfs --help` stays light and a service's
dependencies load only when it runs.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import typer

app = typer.Typer(help="Run a live GFS service (Kafka, Postgres).", no_args_is_help=True)


def _run_until_signalled(main: object) -> None:
    """Run the coroutine factory `main(stop)` with SIGINT/SIGTERM setting `stop`."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)  # type: ignore[operator]

    asyncio.run(runner())


@app.command("quota")
def quota(
    refresh_s: float = typer.Option(None, "--refresh-s", help="quota refresh interval (default 300 s)"),
    port: int = typer.Option(None, "--port", help="SRE API port (default 8081; 0: none)"),
) -> None:
    """The quota service: forecasts, pool status and guarantee outcomes in, SpotQuota out."""
    from services.quota.service import QuotaServiceSettings, run_quota_service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, object] = {}
    if refresh_s is not None:
        overrides["quota_refresh_s"] = refresh_s
    if port is not None:
        overrides["quota_api_port"] = port
    settings = QuotaServiceSettings(**overrides)  # type: ignore[arg-type]

    async def main(stop: asyncio.Event) -> None:
        # A lost fence ends one active period; wait for it again until asked to stop.
        while not stop.is_set():
            await run_quota_service(settings, stop)

    _run_until_signalled(main)


@app.command("forecast")
def forecast() -> None:
    """The forecast stream (Faust): task events in, per-tenant and per-pool forecasts out."""
    from services.forecast.app import ForecastServiceSettings, run_forecast_worker

    run_forecast_worker(ForecastServiceSettings())
