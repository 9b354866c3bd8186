"""`gfs stack ...`: operations on the running Kafka stack (topic creation, the smoke check).

The typer app is built by `build_app()`-style code in services/cli.py importing `app`; the
commands import their heavy dependencies inside, so `gfs --help` stays fast.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gfs.services.platform.cli_output import Output, OutputOption, echo_json

app = typer.Typer(no_args_is_help=True, help="Operate the Kafka stack (topics, smoke check).")


@app.command("topics")
def topics(
    bootstrap_servers: Annotated[
        str | None,
        typer.Option("--bootstrap-servers", help="Overrides KAFKA_BOOTSTRAP_SERVERS."),
    ] = None,
    replication_factor: Annotated[
        int, typer.Option(min=1, help="Replicas per partition (1 on the dev broker).")
    ] = 1,
    timeout_ms: Annotated[int, typer.Option(min=1_000, help="Admin request timeout.")] = 30_000,
) -> None:
    """Create every registry topic (partitions, retention.ms, cleanup.policy); safe to re-run."""
    from aiokafka.errors import KafkaError

    from gfs.schemas.topics import TOPICS
    from gfs.services.platform.kafka.topic_admin import ensure_topics
    from gfs.services.platform.settings import PlatformSettings

    settings = PlatformSettings()
    servers = bootstrap_servers or settings.kafka_bootstrap_servers
    specs = list(TOPICS)
    try:
        report = asyncio.run(
            ensure_topics(
                servers,
                specs,
                replication_factor=replication_factor,
                timeout_ms=timeout_ms,
                security=settings.kafka_security,
            )
        )
    except KafkaError as exc:
        typer.echo(f"error: Kafka at {servers}: {exc} (is the stack up? `make up`)", err=True)
        raise typer.Exit(code=1) from exc
    for spec in sorted(specs, key=lambda s: s.name):
        state = "created" if spec.name in report.created else "exists, configs applied"
        configs = " ".join(f"{k}={v}" for k, v in spec.kafka_config().items())
        typer.echo(f"{spec.name}: {state} (partitions={spec.partitions} {configs})")
    for name, have, want in report.partition_mismatches:
        typer.echo(
            f"WARNING {name}: broker has {have} partitions, registry says {want}; not changed "
            "(repartitioning moves keys; recreate the topic deliberately if needed)",
            err=True,
        )


@app.command("smoke")
def smoke(
    tasks: Annotated[
        int, typer.Option("--tasks", min=1, max=1_000, help="Good TaskSubmitted events to send.")
    ] = 12,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=1.0, help="Seconds the consumer may take to see them all.")
    ] = 30.0,
    seed: Annotated[int, typer.Option(help="Seed for the task mix (models, sizes, tenants).")] = 0,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option("--bootstrap-servers", help="Overrides KAFKA_BOOTSTRAP_SERVERS."),
    ] = None,
) -> None:
    """End-to-end check of the live stack: publish, dead-letter, consume, trace. Exit 1 on failure."""
    from aiokafka.errors import KafkaError
    from rich.console import Console

    from gfs.services.platform.settings import PlatformSettings
    from gfs.services.platform.smoke import render_report, run_smoke
    from gfs.services.platform.tracing import TRACER_NAME, configure_tracing

    settings = PlatformSettings()
    servers = bootstrap_servers or settings.kafka_bootstrap_servers
    # soft_wrap: one event per line even when piped (rich wraps at 80 columns off a terminal).
    console = Console(highlight=False, soft_wrap=True)
    # The CLI is a composition root, so it installs the process-wide provider; with an OTLP
    # endpoint set the smoke trace shows up in the collector (Jaeger) under this trace id.
    provider = configure_tracing(settings)
    try:
        report = asyncio.run(
            run_smoke(
                bootstrap_servers=servers, tasks=tasks, tracer=provider.get_tracer(TRACER_NAME),
                console=console, timeout_s=timeout_s, seed=seed, security=settings.kafka_security,
            )
        )  # fmt: skip
    except (KafkaError, RuntimeError) as exc:
        console.print(f"[bold red]FAIL[/] Kafka at {servers}: {exc} (is the stack up? `make up`)")
        raise typer.Exit(code=1) from exc
    finally:
        provider.shutdown()
    render_report(report, console)
    if not report.ok:
        raise typer.Exit(code=1)


@app.command("node-key")
def node_key_cmd(
    nodes: Annotated[list[str], typer.Argument(help="Node names (the agent's --node).")],
    output: OutputOption = Output.table,
) -> None:
    """Print each node's command key (hex) derived from GFS_COMMAND_SECRET: `NODE KEY` per line.

    For provisioning agents with their own key only (GFS_NODE_KEY, or the file the Kubernetes
    DaemonSet reads, docs/kubernetes.md); run it where the master secret lives, never on a node.
    """
    import os

    from gfs.services.platform.signing import node_key

    # The same variable, and the same UTF-8 bytes, as PreemptionSettings.master_secret().
    secret = os.environ.get("GFS_COMMAND_SECRET", "")
    try:
        if not secret:
            raise ValueError("GFS_COMMAND_SECRET is not set (the scheduler's master secret)")
        keys = [(node, node_key(secret.encode("utf-8"), node).hex()) for node in nodes]
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    if output is Output.json:
        echo_json(dict(keys))
        return
    for node, key in keys:
        typer.echo(f"{node} {key}")
