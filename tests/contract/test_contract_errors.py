"""Invalid messages are rejected with an error that names the offending field.

Each case starts from a valid golden message, breaks one thing, and states where the error must
point (the pydantic `loc`) and a fragment of its message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from contract_goldens import golden_message, to_bytes
from pydantic import ValidationError

from schemas.topics import decode, topic_for_event_type

Message = dict[str, Any]


@dataclass(frozen=True)
class BrokenCase:
    id: str
    event_type: str
    breaks: Callable[[Message], None]
    loc: tuple[str | int, ...]
    says: str


def _set(path: tuple[str | int, ...], value: object) -> Callable[[Message], None]:
    def apply(message: Message) -> None:
        target: Any = message
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return apply


def _drop(path: tuple[str | int, ...]) -> Callable[[Message], None]:
    def apply(message: Message) -> None:
        target: Any = message
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]

    return apply


CASES = [
    BrokenCase(
        "workers-zero",
        "TaskSubmitted",
        _set(("payload", "workers"), 0),
        ("payload", "workers"),
        "greater than or equal to 1",
    ),
    BrokenCase(
        "gpus-non-positive",
        "TaskSubmitted",
        _set(("payload", "gpus_per_worker"), 0),
        ("payload", "gpus_per_worker"),
        "greater than or equal to 0.01",
    ),
    # Issue 22: one GPU could take unlimited 1e-12-GPU workers; a gang had no upper bound.
    BrokenCase(
        "gpus-below-the-granularity",
        "TaskSubmitted",
        _set(("payload", "gpus_per_worker"), 1e-12),
        ("payload", "gpus_per_worker"),
        "greater than or equal to 0.01",
    ),
    BrokenCase(
        "workers-above-the-bound",
        "TaskSubmitted",
        _set(("payload", "workers"), 1025),
        ("payload", "workers"),
        "less than or equal to 1024",
    ),
    BrokenCase(
        "tenant-not-a-name",
        "TaskSubmitted",
        _set(("payload", "tenant"), "org a/../b"),
        ("payload", "tenant"),
        "should match pattern",
    ),
    BrokenCase(
        "tenant-too-long",
        "TaskSubmitted",
        _set(("payload", "tenant"), "o" * 129),
        ("payload", "tenant"),
        "at most 128 characters",
    ),
    BrokenCase(
        "gpus-fractional-above-one",
        "TaskSubmitted",
        _set(("payload", "gpus_per_worker"), 1.5),
        ("payload", "gpus_per_worker"),
        "whole number",
    ),
    BrokenCase(
        "guarantee-3h",
        "TaskSubmitted",
        _set(("payload", "guarantee_hours"), 3),
        ("payload", "guarantee_hours"),
        "1, 2 or 4",
    ),
    BrokenCase(
        "unknown-class",
        "TaskSubmitted",
        _set(("payload", "task_class"), "LOW"),
        ("payload", "task_class"),
        "'HP' or 'SPOT'",
    ),
    BrokenCase(
        "missing-tenant",
        "TaskSubmitted",
        _drop(("payload", "tenant")),
        ("payload", "tenant"),
        "Field required",
    ),
    BrokenCase(
        "blank-task-id",
        "TaskSubmitted",
        _set(("payload", "task_id"), " job-1"),
        ("payload", "task_id"),
        "pattern",
    ),
    BrokenCase(
        "extra-payload-field",
        "TaskSubmitted",
        _set(("payload", "priority"), 5),
        ("payload", "priority"),
        "Extra inputs are not permitted",
    ),
    BrokenCase(
        "empty-command",
        "TaskSubmitted",
        _set(("payload", "command"), []),
        ("payload", "command"),
        "at least 1",
    ),
    BrokenCase(
        "naive-occurred-at",
        "TaskAccepted",
        _set(("occurred_at",), "2024-08-03T09:14:28"),
        ("occurred_at",),
        "timezone",
    ),
    BrokenCase(
        "naive-started-at",
        "TaskStarted",
        _set(("payload", "started_at"), "2024-08-03T10:00:00"),
        ("payload", "started_at"),
        "timezone",
    ),
    BrokenCase(
        "duplicate-worker",
        "TaskStarted",
        _set(("payload", "placements", 1, "worker_index"), 0),
        ("payload", "placements"),
        "distinct",
    ),
    BrokenCase(
        "unknown-rejection-reason",
        "TaskRejected",
        _set(("payload", "reason"), "BAD"),
        ("payload", "reason"),
        "UNKNOWN_GPU_MODEL",
    ),
    BrokenCase(
        "period-ends-before-start",
        "GuaranteePeriodClosed",
        _set(("payload", "period_end"), "2024-08-03T11:00:00Z"),
        ("payload",),
        "period_end",
    ),
    BrokenCase(
        "utilisation-over-100",
        "NodeTelemetry",
        _set(("payload", "gpus", 0, "utilisation_pct"), 120),
        ("payload", "gpus", 0, "utilisation_pct"),
        "less than or equal to 100",
    ),
    BrokenCase(
        "gpu-over-allocated",
        "NodeTelemetry",
        _set(("payload", "gpus", 0, "allocations", 1, "fraction"), 0.75),
        ("payload", "gpus", 0),
        "more than 1",
    ),
    BrokenCase(
        "missing-q90",
        "DemandForecast",
        _drop(("payload", "horizon", 2, "quantiles", "0.9")),
        ("payload", "horizon", 2, "quantiles"),
        "0.9",
    ),
    BrokenCase(
        "crossing-quantiles",
        "DemandForecast",
        _set(("payload", "horizon", 0, "quantiles", "0.9"), 2800.0),
        ("payload", "horizon", 0, "quantiles"),
        "quantiles cross",
    ),
    BrokenCase(
        "bind-placement-elsewhere",
        "BindCommand",
        _set(("payload", "placements", 0, "node"), "a100-node-099"),
        ("payload",),
        "placements must all be on node",
    ),
    BrokenCase(
        "negative-std",
        "DemandForecast",
        _set(("payload", "horizon", 0, "std"), -1),
        ("payload", "horizon", 0, "std"),
        "greater than or equal to 0",
    ),
    BrokenCase(
        "hour-gap",
        "DemandForecast",
        _set(("payload", "horizon", 3, "hour_ahead"), 5),
        ("payload", "horizon"),
        "without gaps",
    ),
    BrokenCase(
        "negative-quota",
        "SpotQuota",
        _set(("payload", "quotas", 0, "quota_gpus"), -1),
        ("payload", "quotas", 0, "quota_gpus"),
        "greater than or equal to 0",
    ),
    BrokenCase(
        "quota-window-reversed",
        "SpotQuota",
        _set(("payload", "valid_until"), "2024-08-03T09:00:00Z"),
        ("payload",),
        "valid_until",
    ),
    BrokenCase(
        "bad-command-id",
        "EvictCommand",
        _set(("payload", "command_id"), "evict-1"),
        ("payload", "command_id"),
        "UUID",
    ),
    BrokenCase(
        "negative-grace",
        "EvictCommand",
        _set(("payload", "grace_seconds"), -5),
        ("payload", "grace_seconds"),
        "greater than or equal to 0",
    ),
    BrokenCase(
        "no-victims",
        "EvictCommand",
        _set(("payload", "task_ids"), []),
        ("payload", "task_ids"),
        "at least 1 item",
    ),
    BrokenCase(
        "unknown-ack-outcome",
        "EvictAck",
        _set(("payload", "outcome"), "DONE"),
        ("payload", "outcome"),
        "CHECKPOINTED",
    ),
    BrokenCase(
        "bad-base64",
        "DeadLetter",
        _set(("payload", "original"), "not base64!"),
        ("payload", "original"),
        "base64",
    ),
    BrokenCase(
        "event-type-mismatch",
        "TaskSubmitted",
        _set(("event_type",), "TaskCancelled"),
        ("payload", "gpu_model"),
        "Extra inputs are not permitted",
    ),
    BrokenCase(
        "unknown-event-type",
        "TaskSubmitted",
        _set(("event_type",), "TaskExploded"),
        ("event_type",),
        "not carried by topic 'gfs.tasks.submit'",
    ),
    BrokenCase(
        "missing-event-type", "TaskSubmitted", _drop(("event_type",)), ("event_type",), "must be present"
    ),
    BrokenCase(
        "envelope-extra-field",
        "TaskSubmitted",
        _set(("traceparent",), "00-abc"),
        ("traceparent",),
        "Extra inputs are not permitted",
    ),
    BrokenCase(
        "schema-version-zero",
        "TaskSubmitted",
        _set(("schema_version",), 0),
        ("schema_version",),
        "greater than or equal to 1",
    ),
    BrokenCase("missing-producer", "TaskSubmitted", _drop(("producer",)), ("producer",), "Field required"),
    BrokenCase(
        "schema-version-from-the-future",
        "SpotQuota",
        _set(("schema_version",), 2),
        ("schema_version",),
        "schema_version 2 is not supported",
    ),
]


# Issue 22: a NUL in any string of a record used to reach Postgres (which refuses it) and stop a
# partition. Every identifier and free string now refuses it (and the other control characters) at
# decode, naming the field, the character and its index.
_CONTROL_CASES = [
    ("TaskSubmitted", ("payload", "task_id"), "job\x00-1", "U+0000 at index 3"),
    ("TaskSubmitted", ("payload", "tenant"), "org\x00", "U+0000 at index 3"),
    ("TaskSubmitted", ("payload", "gpu_model"), "A100\x00", "U+0000 at index 4"),
    ("TaskSubmitted", ("payload", "command"), "python -c 1\x00", "U+0000 at index 11"),
    (
        "TaskSubmitted",
        ("payload", "command"),
        ["python", "-c\x00"],
        "argv item 1 contains the control character U+0000 at index 2",
    ),
    ("TaskSubmitted", ("payload", "command"), ["python", "\x1b[2J"], "argv item 1 contains the control"),
    ("TaskSubmitted", ("payload", "task_id"), "job\n1", "U+000A at index 3"),
    ("TaskCancelled", ("payload", "reason"), "because\x00", "U+0000 at index 7"),
    ("TaskCancelled", ("payload", "tenant"), "\x00", "U+0000 at index 0"),
    ("TaskRejected", ("payload", "message"), "no\x07", "U+0007 at index 2"),
    ("TaskWithdrawn", ("payload", "reason"), "\x00", "U+0000 at index 0"),
    ("BindCommand", ("payload", "node"), "node\x00", "U+0000 at index 4"),
    ("BindCommand", ("payload", "command"), ["a\x00"], "argv item 0 contains the control character U+0000"),
    ("EvictCommand", ("payload", "task_ids", 0), "t\x00", "U+0000 at index 1"),
    ("EvictAck", ("payload", "detail"), "x\x00", "U+0000 at index 1"),
    ("WorkerExited", ("payload", "detail"), "x\x00", "U+0000 at index 1"),
    ("WorkerStarted", ("payload", "task_id"), "t\x7f", "U+007F at index 1"),
    ("NodeTelemetry", ("payload", "node"), "n\x00", "U+0000 at index 1"),
    ("SpotQuota", ("payload", "forecast_version"), "v\x00", "U+0000 at index 1"),
    ("DemandForecast", ("payload", "tenant"), "o\x00", "U+0000 at index 1"),
    ("DemandForecast", ("payload", "model_version"), "v\x00", "U+0000 at index 1"),
    ("PoolStatus", ("payload", "pool"), "p\x00", "U+0000 at index 1"),
    ("ClockTick", ("payload", "clock"), "c\x00", "U+0000 at index 1"),
    ("TaskAccepted", ("producer",), "gfs\x00", "U+0000 at index 3"),
]


@pytest.mark.parametrize(
    ("event_type", "loc", "value", "says"),
    _CONTROL_CASES,
    ids=[f"{c[0]}-{c[1][-1]}-{i}" for i, c in enumerate(_CONTROL_CASES)],
)
def test_control_characters_are_refused_naming_the_field(
    event_type: str, loc: tuple[str | int, ...], value: object, says: str
) -> None:
    message = golden_message(event_type)
    _set(loc, value)(message)
    with pytest.raises(ValidationError) as info:
        decode(topic_for_event_type(event_type).name, to_bytes(message))
    errors = info.value.errors()
    matching = [e for e in errors if tuple(e["loc"]) == loc]
    assert matching, f"no error at {loc}; got {[(e['loc'], e['msg']) for e in errors]}"
    assert says in matching[0]["msg"]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_error_names_the_field(case: BrokenCase) -> None:
    message = golden_message(case.event_type)
    case.breaks(message)
    with pytest.raises(ValidationError) as info:
        decode(topic_for_event_type(case.event_type).name, to_bytes(message))
    errors = info.value.errors()
    matching = [e for e in errors if tuple(e["loc"]) == case.loc]
    assert matching, f"no error at {case.loc}; got {[e['loc'] for e in errors]}"
    assert case.says in matching[0]["msg"]
    # The printed error (what ends up in logs and dead letters) names the field too.
    assert str(case.loc[-1]) in str(info.value)


def test_event_type_that_disagrees_with_a_valid_payload_is_rejected() -> None:
    # A valid TaskCancelled payload labelled TaskSubmitted: the label decides the model, so the
    # missing TaskSubmitted fields are reported instead of the payload being read as a cancel.
    message = golden_message("TaskCancelled")
    message["event_type"] = "TaskSubmitted"
    with pytest.raises(ValidationError, match="gpu_model"):
        decode("gfs.tasks.submit", to_bytes(message))


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"{not json", json.JSONDecodeError),
        (b"\xff\xfe", UnicodeDecodeError),
        (b"[1, 2]", ValidationError),
        (b'"TaskSubmitted"', ValidationError),
    ],
    ids=["malformed-json", "not-utf8", "json-array", "json-string"],
)
def test_bytes_that_are_not_an_envelope_object(raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode("gfs.tasks.submit", raw)
    assert issubclass(error, ValueError), "consumers catch ValueError for every decode failure"


def test_decode_on_an_unknown_topic_names_it() -> None:
    with pytest.raises(KeyError, match=r"gfs\.unknown"):
        decode("gfs.unknown", to_bytes(golden_message("TaskSubmitted")))


def test_scrub_text_makes_foreign_text_fit_a_free_string() -> None:
    # What a service echoes from elsewhere (an OS error, a process's output) is escaped, not refused.
    from schemas.fields import scrub_text
    from schemas.workers import WorkerExited

    scrubbed = scrub_text("exec failed\x00: \x1b[31mred\x1b[0m\tand\nnext\x7f")
    assert scrubbed == "exec failed\\x00: \\x1b[31mred\\x1b[0m\tand\nnext\\x7f"
    message = golden_message("WorkerExited")
    message["payload"]["detail"] = scrubbed
    decoded = decode(topic_for_event_type("WorkerExited").name, to_bytes(message)).payload
    assert isinstance(decoded, WorkerExited) and decoded.detail == scrubbed
