"""The `gfs` command line: the composition root that mounts each area's sub-commands.

Sub-apps are imported inside `build_app()` rather than at module import so `import gfs.services.cli`
has no side effects, and so heavy dependencies (matplotlib, torch) load only when a command that
needs them runs (each sub-app imports those inside its commands).
"""

from __future__ import annotations

import importlib

import typer

# (command name, module, attribute): each module owns one typer sub-app.
_SUBAPPS: tuple[tuple[str, str, str], ...] = (
    ("schemas", "gfs.services.platform.schema_cli", "app"),
    ("stack", "gfs.services.platform.stack_cli", "app"),
    ("db", "gfs.services.platform.db_cli", "app"),
    ("deadletter", "gfs.services.platform.deadletter_cli", "app"),
    ("quota", "gfs.services.quota.quota_cli", "app"),
    ("trace", "gfs.services.simulator.trace_cli", "app"),
    ("bench", "gfs.services.simulator.bench_cli", "app"),
    ("forecast", "gfs.ml.cli", "app"),
    ("serve", "gfs.services.serve_cli", "app"),
    ("livebench", "gfs.services.livebench.cli", "app"),
    ("faults", "gfs.services.faults.cli", "app"),
    ("demo", "gfs.services.demo.cli", "app"),
    ("parity", "gfs.services.parity.cli", "app"),
)

# Single commands mounted at the top level: (command name, module, function attribute).
_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("simulate", "gfs.services.simulator.cli", "simulate"),
    ("evaluate", "gfs.services.simulator.evaluate_cli", "evaluate"),
    ("evaluate-budgets", "gfs.services.simulator.budget_cli", "evaluate_budgets"),
    ("packing", "gfs.services.simulator.packing_cli", "packing"),
    ("fake-task", "gfs.services.node_agent.fake_task_cli", "fake_task"),
    ("replay", "gfs.services.producers.replay", "replay"),
    ("explain", "gfs.services.preemption.sre.explain_cli", "explain"),
    ("whatif", "gfs.services.whatif.cli", "whatif"),
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="gfs",
        help="GFS: preemption-aware GPU scheduling with predictive spot quotas.",
        no_args_is_help=True,
        add_completion=False,
    )

    @app.callback(invoke_without_command=True)
    def _root(
        version: bool = typer.Option(False, "--version", help="print the installed gfs version and exit"),
    ) -> None:
        if version:
            from importlib.metadata import version as installed

            typer.echo(f"gfs {installed('gfs')}")
            raise typer.Exit()

    for name, module, attr in _SUBAPPS:
        app.add_typer(getattr(importlib.import_module(module), attr), name=name)
    for name, module, attr in _COMMANDS:
        app.command(name=name)(getattr(importlib.import_module(module), attr))
    # `gfs bench pipeline` is the live pipeline's benchmark: it lives in services/livebench (the
    # simulator may not touch Kafka), and is mounted beside the simulator's benchmarks here.
    bench = importlib.import_module("gfs.services.simulator.bench_cli").app
    bench.command(name="pipeline")(
        importlib.import_module("gfs.services.livebench.preemption_bench").preemption
    )
    bench.command(name="failover")(importlib.import_module("gfs.services.livebench.failover_bench").failover)
    # `gfs schemas openapi`: the HTTP APIs' contracts live in the service packages (api_docs.py).
    schemas = importlib.import_module("gfs.services.platform.schema_cli").app
    schemas.command(name="openapi")(importlib.import_module("gfs.services.api_docs").openapi)
    return app


def main() -> None:
    build_app()()
