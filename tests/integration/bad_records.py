"""The bad records of the bad-input test (test_bad_input.py): which topics get which kinds, what
each kind looks like on each topic (built from a valid example of the topic), and the reason its
dead letter must carry."""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path
from typing import Any

from payload_examples import all_examples

from gfs.schemas.envelope import wrap
from gfs.schemas.topics import encode, topic

OVERSIZED_BYTES = 900_000
CATEGORIES = ("not_json", "not_utf8", "json_array", "missing_field", "wrong_version", "wrong_type")

SUBMIT, LIFECYCLE, TELEMETRY = "gfs.tasks.submit", "gfs.tasks.lifecycle", "gfs.nodes.telemetry"
FORECASTS, STATUS, QUOTAS = "gfs.forecasts", "gfs.pools.status", "gfs.quotas"
POOL_DEMAND = "gfs.pools.demand"
BIND, EVICT, EVICT_ACK, WORKER_ACK = (
    "gfs.commands.bind",
    "gfs.commands.evict",
    "gfs.commands.evict-ack",
    "gfs.commands.worker-ack",
)
INPUT_TOPICS = (
    SUBMIT, LIFECYCLE, TELEMETRY, FORECASTS, STATUS, QUOTAS, BIND, EVICT, EVICT_ACK, WORKER_ACK, POOL_DEMAND,
)  # fmt: skip
# Which service reads which topic (docs/services.md): each dead-letters what it reads.
READS = {
    "forecast": (SUBMIT, LIFECYCLE, POOL_DEMAND),
    "quota": (FORECASTS, STATUS, LIFECYCLE),
    "router": (SUBMIT, TELEMETRY, QUOTAS, EVICT_ACK, WORKER_ACK),
    "agent": (BIND, EVICT),  # its own partition only: the bad records are keyed to its node
}
REASONS = {
    "not_json": "malformed JSON",
    "not_utf8": "not UTF-8 text",
    "json_array": "must be a JSON object",
    "missing_field": "Field required",
    "wrong_version": "schema_version 2 is not supported",
    "wrong_type": "is not carried by topic",
    "oversized": "padding: Extra inputs are not permitted",
}

# The machine-readable reason each kind's dead letter carries (docs/protocol.md section 1's table,
# issue 38 item 3): checked against the page itself by `documented_reasons`.
REASON_CODES = {
    "not_json": "malformed_json",
    "not_utf8": "not_utf8",
    "json_array": "envelope_type",
    "missing_field": "invalid_payload",
    "wrong_version": "unsupported_schema_version",
    "wrong_type": "unknown_event_type",
    "oversized": "invalid_payload",
}
PROTOCOL_PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def documented_reasons() -> set[str]:
    """The codes in protocol.md's table of dead-letter reasons (its rows' first cells)."""
    text = PROTOCOL_PAGE.read_text()
    table = text[text.index("| `reason` | the record |") :].split("\n\n", 1)[0]
    return {
        code for row in table.splitlines()[2:] for code in re.findall(r"`([a-z0-9_]+)`", row.split("|")[1])
    }


def _plan(count: int) -> list[tuple[str, str]]:
    """(topic, category) for each bad record: every topic gets every category; the oversized ones
    are 1 % (at least one per topic), so the run stays within the broker's disk and the CI time."""
    oversized = max(len(INPUT_TOPICS), count // 100)
    plan = [
        (INPUT_TOPICS[i % len(INPUT_TOPICS)], CATEGORIES[(i // len(INPUT_TOPICS)) % len(CATEGORIES)])
        for i in range(count - oversized)
    ]
    plan += [(INPUT_TOPICS[j % len(INPUT_TOPICS)], "oversized") for j in range(oversized)]
    random.Random(14).shuffle(plan)
    return plan


class BadRecords:
    """Builds the bad value of each category for each topic from a valid example of the topic."""

    def __init__(self) -> None:
        examples = all_examples()
        self.valid: dict[str, dict[str, Any]] = {}
        self.required: dict[str, str] = {}
        self.foreign: dict[str, list[dict[str, Any]]] = {}
        for name in INPUT_TOPICS:
            spec = topic(name)
            example = examples[spec.payload_types[0].__name__]
            self.valid[name] = json.loads(encode(wrap(example, producer="bad-input")))
            self.required[name] = next(
                f for f, info in type(example).model_fields.items() if info.is_required()
            )
            others = [p for p in examples.values() if not isinstance(p, tuple(spec.payload_types))]
            self.foreign[name] = [json.loads(encode(wrap(p, producer="bad-input"))) for p in others]

    def value(self, name: str, category: str, i: int) -> bytes:
        base = dict(self.valid[name], event_id=str(uuid.uuid4()))
        if category == "not_json":
            return f"{{not json #{i}".encode()
        if category == "not_utf8":
            return b"\xff\xfe\x00bad-" + str(i).encode()
        if category == "json_array":
            return json.dumps([base, i]).encode()
        if category == "missing_field":
            payload = dict(base["payload"])
            del payload[self.required[name]]
            return json.dumps(base | {"payload": payload}).encode()
        if category == "wrong_version":
            return json.dumps(base | {"schema_version": 2}).encode()
        if category == "wrong_type":
            other = self.foreign[name][i % len(self.foreign[name])]
            return json.dumps(dict(other, event_id=str(uuid.uuid4()))).encode()
        if category == "oversized":
            return json.dumps(base | {"padding": "x" * OVERSIZED_BYTES}).encode()
        raise AssertionError(category)
