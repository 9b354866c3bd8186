"""The generated parts of docs/protocol.md: topics, every message's fields, the signed-field rule.

docs/protocol.md is written for people building an agent or a producer in another language from the
document alone. Its prose is hand-written; the tables that restate the wire contracts are rendered
here from the registry (`gfs.schemas.topics.TOPICS`) and the pydantic models' JSON Schemas (and the
agents' signature vectors from fixed messages signed by `signing`), between
`<!-- BEGIN generated: NAME -->` / `<!-- END generated: NAME -->` markers, so the document cannot
drift from the code: `gfs schemas protocol --check` (run by tests/static) fails when it has.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.telemetry import GpuAllocation, GpuSample, NodeTelemetry, RunningWorker
from gfs.schemas.topics import TOPICS
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.signing import ADDED_AFTER_V1, SignedMessage, node_key, signature_of, signing_bytes

_MARKER = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END generated: (?P=name) -->)",
    re.DOTALL,
)


def render_topics() -> str:
    lines = [
        "| topic | Kafka key | messages (`event_type`) | partitions | retention | cleanup |",
        "|---|---|---|---|---|---|",
    ]
    for spec in TOPICS:
        retention = "forever" if spec.retention_ms is None else f"{spec.retention_ms / 86_400_000:g} d"
        messages = ", ".join(f"`{t}`" for t in spec.event_types())
        cleanup = "compact" if spec.compacted else "delete"
        lines.append(
            f"| `{spec.name}` | `payload.{spec.key_field}` | {messages} | {spec.partitions} "
            f"| {retention} | {cleanup} |"
        )
    return "\n".join(lines) + "\n"


def render_messages() -> str:
    """One table per message type (and per nested object type), in registry order."""
    sections: list[str] = []
    seen: set[str] = set()
    for spec in TOPICS:
        for payload_type in spec.payload_types:
            schema = payload_type.model_json_schema()
            defs: dict[str, Any] = schema.get("$defs", {})
            sections.append(_object_table(payload_type.__name__, schema, defs, f"on `{spec.name}`"))
            seen.add(payload_type.__name__)
            for name, sub in defs.items():
                if name in seen:
                    continue
                seen.add(name)
                if sub.get("type") == "object":
                    sections.append(_object_table(name, sub, defs, "nested object"))
                elif "enum" in sub:
                    values = ", ".join(f"`{v}`" for v in sub["enum"])
                    text = _one_line(sub.get("description", ""))
                    sections.append(f"#### `{name}` (enumeration)\n\n{text} Values: {values}.\n")
    return "\n".join(sections)


def render_signed_fields() -> str:
    names = ", ".join(f"`{name}`" for name in ADDED_AFTER_V1)
    return f"Fields left out of the signed bytes while they are null: {names}.\n"


# The key vector of section 5 (the document writes it out by hand; the conformance test reads it
# from there, so these two constants cannot drift from it unnoticed).
VECTOR_MASTER = bytes(range(32))
VECTOR_NODE = "gpu-node-07"


def _report_vectors() -> list[tuple[str, str, SignedMessage]]:
    """(name, what it shows, message) of each agent-message vector: answers to section 5's command
    vectors, chosen to cover a post-v1 null left out, one kept, floats and datetimes."""
    node, at = VECTOR_NODE, datetime(2026, 12, 4, 9, 30, 12, 500000, tzinfo=UTC)
    evict = UUID("c3d4e5f6-a7b8-4c9d-8e0f-a1b2c3d4e5f6")
    bind = UUID("0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d")
    gpu = GpuSample(
        index=3, utilisation_pct=97.5, memory_used_mib=40960.0, memory_total_mib=81920.0,
        allocations=(GpuAllocation(task_id="job-42", fraction=0.5),),
    )  # fmt: skip
    return [
        ("evict-ack", "The EvictAck answering the `evict` vector (its null `attempt` is left out)",
         EvictAck(command_id=evict, node=node, task_ids=("job-42", "job-43"),
                  outcome=EvictOutcome.CHECKPOINTED, acked_at=at)),
        ("worker-started", "The WorkerStarted of the `bind-overhead` vector's worker (attempt 2)",
         WorkerStarted(command_id=bind, node=node, task_id="job-42", worker_index=1, pid=48213,
                       started_at=at, attempt=2)),
        ("worker-exited", "Its WorkerExited, killed by SIGKILL during an eviction (`detail` \"\" is signed)",
         WorkerExited(command_id=bind, node=node, task_id="job-42", worker_index=1, exit_code=-9,
                      exited_at=at, evicted=True, attempt=2)),
        ("telemetry", "A NodeTelemetry with its `running` report (floats as the scheduler writes them)",
         NodeTelemetry(node=node, gpu_model="H100", sampled_at=at, gpus=(gpu,),
                       running=(RunningWorker(task_id="job-42", attempt=2, worker_index=1),))),
        ("telemetry-no-report", "A NodeTelemetry without a report (its null `running` is left out)",
         NodeTelemetry(node=node, gpu_model="H100", sampled_at=at, gpus=(gpu,))),
    ]  # fmt: skip


def render_report_vectors() -> str:
    """Section 5's vectors of the agents' messages: each payload as an agent sends it, signed
    under K(gpu-node-07), and its signed bytes."""
    key = node_key(VECTOR_MASTER, VECTOR_NODE)
    blocks: list[str] = []
    for name, what, message in _report_vectors():
        signed = message.model_copy(update={"signature": signature_of(message, key=key)})
        blocks.append(
            f"{what}:\n\n```json vector:{name}:payload\n{signed.model_dump_json()}\n```\n\n"
            f"```text vector:{name}:signed-bytes\n{signing_bytes(signed).decode('utf-8')}\n```\n"
        )
    return "\n".join(blocks)


RENDERERS = {
    "topics": render_topics,
    "messages": render_messages,
    "signed-fields": render_signed_fields,
    "report-vectors": render_report_vectors,
}


def regenerate(text: str) -> str:
    """`text` with every generated section replaced by its current rendering.

    Raises ValueError when a marker names no renderer or a renderer's section is missing, so a
    typo in the document cannot silently freeze a stale table.
    """
    found: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in RENDERERS:
            raise ValueError(f"docs/protocol.md: unknown generated section {name!r}")
        found.add(name)
        return match.group(1) + RENDERERS[name]() + match.group(4)

    out = _MARKER.sub(replace, text)
    missing = set(RENDERERS) - found
    if missing:
        raise ValueError(f"docs/protocol.md lacks the generated sections {sorted(missing)}")
    return out


def _object_table(name: str, schema: dict[str, Any], defs: dict[str, Any], where: str) -> str:
    required = set(schema.get("required", ()))
    head = f"#### `{name}` ({where})\n\n{_one_line(schema.get('description', ''))}\n\n"
    rows = ["| field | type | required / default | constraints | meaning |", "|---|---|---|---|---|"]
    for field, prop in schema.get("properties", {}).items():
        presence = "required" if field in required else f"default `{_json(prop.get('default'))}`"
        rows.append(
            f"| `{field}` | {_type_of(prop, defs)} | {presence} | {_constraints(prop)} "
            f"| {_one_line(prop.get('description', ''))} |"
        )
    return head + "\n".join(rows) + "\n"


def _type_of(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return f"`{prop['$ref'].rsplit('/', 1)[-1]}`"
    if "anyOf" in prop:
        return " or ".join(_type_of(option, defs) for option in prop["anyOf"])
    if "const" in prop:
        return f"`{_json(prop['const'])}`"
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        return f"array of {_type_of(items, defs)}" if isinstance(items, dict) else "array"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of {_type_of(prop['additionalProperties'], defs)}"
    if "enum" in prop:
        return "one of " + ", ".join(f"`{_json(v)}`" for v in prop["enum"])
    label = str(kind) if kind else "any"
    if "format" in prop:
        label += f" ({prop['format']})"
    return label


_CONSTRAINTS = (
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("pattern", "matches `{}`"),
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minItems", ">= {} items"),
    ("maxItems", "<= {} items"),
)


def _constraints(prop: dict[str, Any]) -> str:
    parts = [template.format(prop[key]) for key, template in _CONSTRAINTS if key in prop]
    for option in prop.get("anyOf", ()):
        parts += [template.format(option[key]) for key, template in _CONSTRAINTS if key in option]
    # A pipe inside a table cell would split the column.
    return "; ".join(parts).replace("|", "\\|") or ""


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _json(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def payload_models() -> list[type[BaseModel]]:
    """Every registered message type (for tests that check the document covers them all)."""
    return [payload_type for spec in TOPICS for payload_type in spec.payload_types]
