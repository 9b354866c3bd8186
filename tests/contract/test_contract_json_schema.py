"""`gfs schemas export`: one JSON Schema per topic that accepts real messages and rejects bad ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from contract_goldens import golden_id, golden_message, golden_paths
from jsonschema import Draft202012Validator, FormatChecker
from typer.testing import CliRunner

from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import TOPICS, encode, topic_for_event_type
from gfs.services.platform.schema_cli import app


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Draft202012Validator]:
    """Run the real CLI once and load what it wrote, keyed by topic name."""
    out = tmp_path_factory.mktemp("schemas")
    result = CliRunner().invoke(app, ["export", str(out)])
    assert result.exit_code == 0, result.output
    validators = {}
    for path in sorted(out.iterdir()):
        schema = json.loads(path.read_text())
        Draft202012Validator.check_schema(schema)
        validators[path.name.removesuffix(".schema.json")] = Draft202012Validator(
            schema, format_checker=FormatChecker()
        )
    return validators


def _errors(validator: Draft202012Validator, instance: Any) -> list[str]:
    return [error.message for error in validator.iter_errors(instance)]


def test_one_schema_file_per_topic(exported: dict[str, Draft202012Validator]) -> None:
    assert sorted(exported) == sorted(spec.name for spec in TOPICS)


@pytest.mark.parametrize("path", golden_paths(), ids=golden_id)
def test_schema_accepts_golden_messages(exported: dict[str, Draft202012Validator], path: Path) -> None:
    validator = exported[topic_for_event_type(path.stem).name]
    assert _errors(validator, json.loads(path.read_text())) == []


def test_schema_accepts_a_freshly_encoded_message(exported: dict[str, Draft202012Validator]) -> None:
    env = wrap(
        TaskSubmitted(
            task_id="job-9",
            tenant="org-b",
            gpu_model="A10",
            gpus_per_worker=0.5,
            workers=3,
            task_class=TaskClass.SPOT,
            guarantee_hours=2,
            command=("python", "-m", "train"),
        ),
        producer="gfs-cli",
    )
    assert _errors(exported["gfs.tasks.submit"], json.loads(encode(env))) == []


@pytest.mark.parametrize(
    ("event_type", "path", "value"),
    [
        ("TaskSubmitted", ("payload", "workers"), 0),
        ("TaskSubmitted", ("payload", "task_class"), "LOW"),
        ("TaskSubmitted", ("payload", "guarantee_hours"), 3),
        ("TaskSubmitted", ("payload", "extra"), 1),
        ("TaskSubmitted", ("event_type",), "TaskEvicted"),
        ("TaskStarted", ("payload", "placements"), []),
        ("NodeTelemetry", ("payload", "gpus", 0, "utilisation_pct"), 101),
        ("SpotQuota", ("payload", "eta"), 0),
        ("EvictCommand", ("payload", "command_id"), "evict-1"),
        ("DeadLetter", ("payload", "source_offset"), -1),
        # Issue 22: outside producers learn the control-character rule and the bounds from the schema.
        ("TaskSubmitted", ("payload", "task_id"), "job\u00001"),
        ("TaskSubmitted", ("payload", "tenant"), "org a"),
        ("TaskSubmitted", ("payload", "command"), ["python", "\u0000"]),
        ("TaskSubmitted", ("payload", "command"), "echo \u001b"),
        ("TaskCancelled", ("payload", "reason"), "\u0000"),
        ("TaskSubmitted", ("payload", "gpus_per_worker"), 0.001),
        ("TaskSubmitted", ("payload", "workers"), 1025),
    ],
    ids=[
        "workers-zero",
        "bad-class",
        "guarantee-3h",
        "extra-field",
        "foreign-event-type",
        "no-placements",
        "utilisation-101",
        "eta-zero",
        "command-id-not-uuid",
        "negative-offset",
        "nul-in-task-id",
        "tenant-with-space",
        "nul-in-argv",
        "escape-in-shell-command",
        "nul-in-cancel-reason",
        "gpus-below-granularity",
        "workers-above-bound",
    ],
)
def test_schema_rejects_invalid_messages(
    exported: dict[str, Draft202012Validator], event_type: str, path: tuple[str | int, ...], value: object
) -> None:
    message = golden_message(event_type)
    target: Any = message
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert _errors(exported[topic_for_event_type(event_type).name], message) != []


def test_multi_payload_topics_are_discriminated_by_event_type(
    exported: dict[str, Draft202012Validator],
) -> None:
    schema = exported["gfs.tasks.lifecycle"].schema
    assert schema["discriminator"]["propertyName"] == "event_type"
    assert len(schema["oneOf"]) == len(topic_for_event_type("TaskStarted").payload_types)
