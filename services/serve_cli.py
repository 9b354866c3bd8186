"""`gfs serve SERVICE`: run one live service in the foreground until SIGINT/SIGTERM.

Each command imports its service inside the function, so `gfs --help` stays light and a service's
dependencies load only when it runs.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from gfs.services.platform.settings import PlatformSettings

app = typer.Typer(help="Run a live GFS service (Kafka, Postgres).", no_args_is_help=True)


def _logging(settings: PlatformSettings, service: str) -> None:
    """Logs, and the allocation tracing an operator may switch on (GFS_TRACEMALLOC)."""
    from gfs.services.platform.logs import configure_logging
    from gfs.services.platform.memory_trace import install

    configure_logging(service=service, log_format=settings.gfs_log_format, level=settings.gfs_log_level)
    install(service)


def _run_until_signalled(main: object, settings: PlatformSettings) -> None:
    """Run the coroutine factory `main(stop)` with SIGINT/SIGTERM setting `stop`, on the event loop
    and with the collector's settings `settings` names (services/platform/event_loop.py)."""
    from gfs.services.platform.event_loop import full_collections, run, take_over_full_collections, tune_gc

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # Start-up's objects (modules, settings, libraries) are built: out of the collector's way.
        tune_gc(settings.gfs_gc_freeze, settings.gfs_gc_threshold)
        timer = None
        if settings.gfs_gc_full_every_s > 0:
            take_over_full_collections()
            timer = asyncio.create_task(full_collections(settings.gfs_gc_full_every_s, stop))
        try:
            await main(stop)  # type: ignore[operator]
        finally:
            stop.set()
            if timer is not None:
                await timer

    run(runner(), settings.gfs_event_loop)


@app.command("quota")
def quota(
    refresh_s: float = typer.Option(None, "--refresh-s", help="quota refresh interval (default 300 s)"),
    port: int = typer.Option(None, "--port", help="SRE API port (default 8081; 0: none)"),
) -> None:
    """The quota service: forecasts, pool status and guarantee outcomes in, SpotQuota out."""
    from gfs.services.quota.service import QuotaServiceSettings, run_quota_service

    overrides: dict[str, object] = {}
    if refresh_s is not None:
        overrides["quota_refresh_s"] = refresh_s
    if port is not None:
        overrides["quota_api_port"] = port
    settings = QuotaServiceSettings(**overrides)  # type: ignore[arg-type]
    _logging(settings, "quota")
    try:
        _ = settings.database_url  # unset: say how to set it, before anything starts
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def main(stop: asyncio.Event) -> None:
        from gfs.services.platform.tracing import configure_tracing

        provider = configure_tracing(settings)
        try:
            # A lost fence ends one active period; wait for it again until asked to stop.
            while not stop.is_set():
                await run_quota_service(settings, stop)
        finally:
            await asyncio.to_thread(provider.shutdown)  # flush the batched spans

    _run_until_signalled(main, settings)


@app.command("forecast")
def forecast() -> None:
    """The forecast stream (Faust): task events in, per-tenant and per-pool forecasts out."""
    from gfs.services.forecast.settings import ForecastServiceSettings
    from gfs.services.forecast.worker import run_forecast_worker
    from gfs.services.platform.memory_trace import install
    from gfs.services.platform.tracing import configure_tracing

    settings = ForecastServiceSettings()
    configure_tracing(settings)  # the Faust worker's exit flushes nothing: the last batch may be lost
    install("forecast", take_signal=False)  # SIGUSR2 is mode's (a debugger): timer reports only
    run_forecast_worker(settings)


@app.command("preemption")
def preemption(
    policy: str = typer.Option(
        None, "--policy", help="scheduling policy (default gfs; lease-based ones are refused)"
    ),
    port: int = typer.Option(None, "--port", help="SRE API port (default 8082; 0: none)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="decide and record, publish nothing"),
    instance: str = typer.Option(None, "--instance", help="this instance's name (default host-pid)"),
) -> None:
    """The preemption service: submissions, quotas, telemetry and acks in; bind/evict commands out."""
    from gfs.services.preemption.service import PreemptionSettings, run_preemption_service

    overrides: dict[str, object] = {}
    if policy is not None:
        overrides["preemption_policy"] = policy
    if port is not None:
        overrides["preemption_api_port"] = port
    if dry_run:
        overrides["preemption_dry_run"] = True
    if instance is not None:
        overrides["preemption_instance"] = instance
    settings = PreemptionSettings(**overrides)  # type: ignore[arg-type]
    _logging(settings, "preemption")
    try:
        settings.controller_settings()
        settings.master_secret()
        _ = settings.database_url  # unset: say how to set it, before anything starts
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def main(stop: asyncio.Event) -> None:
        from gfs.services.platform.tracing import configure_tracing

        provider = configure_tracing(settings)
        try:
            await run_preemption_service(settings, stop)
        finally:
            # Flush the batched spans (the last decisions' traces) before the process exits.
            await asyncio.to_thread(provider.shutdown)

    _run_until_signalled(main, settings)


@app.command("node-agent")
def node_agent(
    node: str = typer.Option(None, "--node", help="this node's name (default: the host name)"),
    gpu_model: str = typer.Option(None, "--gpu-model", help="the pool name (default: NVML's model name)"),
    gpus: int = typer.Option(None, "--gpus", help="GPU count of the fake backend (default 8)"),
    fake_gpus: bool = typer.Option(False, "--fake-gpus", help="no NVML: report idle fake GPUs"),
    telemetry_s: float = typer.Option(5.0, "--telemetry-s", help="telemetry (heartbeat) interval"),
    state_dir: str = typer.Option(
        None,
        "--state-dir",
        help="journal and worker logs (default: AGENT_STATE_ROOT/<node>; AGENT_STATE_ROOT defaults to "
        "<state>/agents, <state> = $GFS_STATE_DIR, else $XDG_STATE_HOME/gfs, else ~/.local/state/gfs)",
    ),
    metrics_port: int = typer.Option(0, "--metrics-port", help="serve /metrics on this port (0: none)"),
) -> None:
    """The node agent: this node's bind/evict commands in; workers, acks and telemetry out."""
    import os
    from pathlib import Path

    from gfs.services.node_agent.service import AgentOptions, default_node_name, run_node_agent
    from gfs.services.node_agent.settings import MissingKeyError, NodeAgentSettings

    if not fake_gpus:
        from gfs.services.node_agent.gpu import NVML_MISSING, nvml_installed

        if not nvml_installed():
            typer.echo(f"error: {NVML_MISSING}", err=True)
            raise typer.Exit(2)
    settings = NodeAgentSettings()
    options = AgentOptions(
        node=node or default_node_name(),
        gpu_model=gpu_model,
        gpus=gpus,
        fake_gpus=fake_gpus,
        telemetry_s=telemetry_s,
        state_dir=Path(state_dir).resolve() if state_dir else None,
        metrics_port=metrics_port,
        metrics_host=settings.bind_host(settings.agent_metrics_host),
    )
    _logging(settings, "node-agent")
    try:
        # Keep only this node's key: the master secret leaves the settings and the environment.
        settings = settings.own_key_only(options.node)
    except MissingKeyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    os.environ.pop("GFS_COMMAND_SECRET", None)
    os.environ.pop("GFS_COMMAND_SECRET_PREVIOUS", None)  # the rotated-out master too (key_rotation.py)

    async def main(stop: asyncio.Event) -> None:
        from gfs.services.platform.tracing import configure_tracing

        provider = configure_tracing(settings)
        try:
            await run_node_agent(settings, options, stop)
        finally:
            await asyncio.to_thread(provider.shutdown)  # flush the batched spans (the last acks')

    _run_until_signalled(main, settings)


@app.command("virtual-nodes")
def virtual_nodes(
    nodes_csv: str = typer.Option(..., "--nodes", help="CSV with node_name,gpu_model,gpu_capacity_num"),
    prefix: str = typer.Option("", "--prefix", help="prepended to every node name"),
    telemetry_s: float = typer.Option(5.0, "--telemetry-s", help="heartbeat interval"),
    clock_name: str | None = typer.Option(
        None, "--clock-name", help="follow this controllable clock on gfs.control.clock (default: wall)"
    ),
) -> None:
    """Many virtual GPU nodes in one process (demos at scale): heartbeats and agent-like acks."""
    import csv

    from gfs.services.node_agent.virtual import run_virtual_nodes
    from gfs.services.platform.settings import PlatformSettings
    from gfs.services.preemption.service import PreemptionSettings

    with open(nodes_csv, newline="") as handle:
        nodes = {
            f"{prefix}{r['node_name']}": (r["gpu_model"], int(r["gpu_capacity_num"]))
            for r in csv.DictReader(handle)
        }
    settings = PlatformSettings()
    _logging(settings, "virtual-nodes")
    keys = PreemptionSettings()
    secret = keys.master_secret()

    async def main(stop: asyncio.Event) -> None:
        await run_virtual_nodes(
            nodes,
            bootstrap=settings.bootstrap_servers,
            secret=secret,
            telemetry_s=telemetry_s,
            stop=stop,
            clock_name=clock_name,
            previous_secret=keys.previous_secret(),
            previous_until=keys.gfs_command_secret_previous_until,
            security=settings.kafka_security,
        )

    _run_until_signalled(main, settings)


@app.command("quota-adapter")
def quota_adapter(
    target: str = typer.Option(..., "--target", help="kueue (ClusterQueue borrowingLimit) or kai (Queue)"),
    config: str = typer.Option(..., "--config", help="mapping YAML (see configs/quota-adapter-kueue.yaml)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print each changed manifest; apply nothing"),
    output: str = typer.Option("json", "--output", help="dry-run format: json (one per line) or yaml"),
    recheck_s: float = typer.Option(5.0, "--recheck-s", help="re-check expiries and retry failed applies"),
) -> None:
    """Kueue/KAI adapter: GFS's SpotQuota per pool in; spot queue limits out (printed or applied)."""
    from datetime import UTC, datetime
    from pathlib import Path

    from gfs.services.adapters.adapter import QuotaAdapter
    from gfs.services.adapters.mapping import ConfigError, load_config
    from gfs.services.adapters.service import KubectlMissingError, kubectl_sink, print_sink, run_quota_adapter
    from gfs.services.platform.settings import PlatformSettings

    if target not in ("kueue", "kai"):
        raise typer.BadParameter("--target must be kueue or kai")
    if output not in ("json", "yaml"):
        raise typer.BadParameter("--output must be json or yaml")
    settings = PlatformSettings()
    _logging(settings, "quota-adapter")
    try:
        adapter = QuotaAdapter(load_config(Path(config)), target)  # type: ignore[arg-type]
        # Render once now: a mapping the CRD schema rejects fails here, before anything is read.
        adapter.manifests(datetime.now(UTC))
        sink = print_sink(output) if dry_run else kubectl_sink()
    except (ConfigError, KubectlMissingError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    async def main(stop: asyncio.Event) -> None:
        await run_quota_adapter(
            adapter, sink, bootstrap_servers=settings.kafka_bootstrap_servers, stop=stop,
            recheck_s=recheck_s, security=settings.kafka_security,
        )  # fmt: skip

    _run_until_signalled(main, settings)
