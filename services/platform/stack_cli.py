"""`gfs stack ...`: operations on the running Kafka stack (topic creation).

The typer app is built by `build_app()`-style code in services/cli.py importing `app`; the
commands import their heavy dependencies inside, so `gfs --help` stays fast.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Operate the Kafka stack (topics).")


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

    from schemas.topics import TOPICS
    from services.platform.kafka.topic_admin import ensure_topics
    from services.platform.settings import PlatformSettings

    settings = PlatformSettings()
    servers = bootstrap_servers or settings.kafka_bootstrap_servers
    specs = list(TOPICS)
    try:
        report = asyncio.run(
            ensure_topics(servers, specs, replication_factor=replication_factor, timeout_ms=timeout_ms)
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
