"""`gfs schemas`: inspect the topic registry, export JSON Schemas, keep infra/kafka/topics.yaml
in step with `gfs.schemas.topics.TOPICS`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from gfs.schemas.topics import TOPICS, TopicSpec
from gfs.services.platform.cli_output import Output, OutputOption, echo_json

app = typer.Typer(no_args_is_help=True, help="Wire contracts: topics, payloads, JSON Schemas.")

# services/platform/schema_cli.py -> the repository root.
_REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOPICS_YAML = _REPO_ROOT / "infra" / "kafka" / "topics.yaml"

_YAML_HEADER = (
    "# Generated from schemas/topics.py by `gfs schemas topics-yaml`; do not edit by hand.\n"
    "# tests/static/test_compose.py fails when this file and the registry disagree.\n"
    "# retention_ms: null means keep forever (retention.ms=-1).\n"
)


def schema_file_name(spec: TopicSpec) -> str:
    return f"{spec.name}.schema.json"


def topics_document() -> dict[str, Any]:
    """The registry as plain data, in the shape of infra/kafka/topics.yaml."""
    return {
        "topics": [
            {
                "name": spec.name,
                "partitions": spec.partitions,
                "replication_factor": 1,
                "retention_ms": spec.retention_ms,
                "compacted": spec.compacted,
                "key": spec.key_field,
                "payloads": list(spec.event_types()),
                "config": spec.kafka_config(),
            }
            for spec in TOPICS
        ]
    }


def render_topics_yaml() -> str:
    return _YAML_HEADER + yaml.safe_dump(topics_document(), sort_keys=False, width=100)


@app.command("list")
def list_topics(output: OutputOption = Output.table) -> None:
    """Print the registry: topic, key, payload types, partitions, retention."""
    from rich.console import Console
    from rich.table import Table

    if output is Output.json:
        echo_json(
            [
                {
                    "topic": spec.name,
                    "key": spec.key_field,
                    "payloads": list(spec.event_types()),
                    "partitions": spec.partitions,
                    "retention_ms": spec.retention_ms,  # null: kept forever
                    "compacted": spec.compacted,
                }
                for spec in TOPICS
            ]
        )
        return

    table = Table(title="GFS topics")
    for column in ("topic", "key", "payloads", "partitions", "retention", "compacted"):
        table.add_column(column)
    for spec in TOPICS:
        retention = "forever" if spec.retention_ms is None else f"{spec.retention_ms / 86_400_000:g} d"
        table.add_row(
            spec.name,
            spec.key_field,
            ", ".join(spec.event_types()),
            str(spec.partitions),
            retention,
            "yes" if spec.compacted else "no",
        )
    Console().print(table)


@app.command("export")
def export(
    directory: Annotated[Path, typer.Argument(help="Folder to write <topic>.schema.json files into.")],
) -> None:
    """Write one JSON Schema per topic: the envelope with the topic's payload union."""
    from gfs.schemas.json_schema import topic_json_schema

    directory.mkdir(parents=True, exist_ok=True)
    for spec in TOPICS:
        path = directory / schema_file_name(spec)
        path.write_text(json.dumps(topic_json_schema(spec), indent=2, sort_keys=True) + "\n")
        typer.echo(f"wrote {path}")


@app.command("topics-yaml")
def topics_yaml(
    output: Annotated[Path, typer.Option(help="Where to write the file.")] = DEFAULT_TOPICS_YAML,
    check: Annotated[bool, typer.Option("--check", help="Only compare; exit 1 if the file differs.")] = False,
) -> None:
    """Write (or --check) infra/kafka/topics.yaml from the registry."""
    expected = render_topics_yaml()
    if check:
        actual = output.read_text() if output.exists() else None
        if actual != expected:
            typer.echo(f"{output} is out of date; run `gfs schemas topics-yaml`", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"{output} matches the registry")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(expected)
    typer.echo(f"wrote {output}")


DEFAULT_PROTOCOL_DOC = _REPO_ROOT / "docs" / "protocol.md"


@app.command("protocol")
def protocol(
    doc: Annotated[Path, typer.Option(help="The protocol document to refresh.")] = DEFAULT_PROTOCOL_DOC,
    check: Annotated[bool, typer.Option("--check", help="Only compare; exit 1 if a table is stale.")] = False,
) -> None:
    """Refresh (or --check) the generated tables of docs/protocol.md from the registry."""
    from gfs.services.platform.protocol_doc import regenerate

    text = doc.read_text()
    try:
        expected = regenerate(text)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(code=1) from None
    if check:
        if expected != text:
            typer.echo(f"{doc} is out of date; run `gfs schemas protocol`", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"{doc} matches the registry")
        return
    doc.write_text(expected)
    typer.echo(f"wrote {doc}")
