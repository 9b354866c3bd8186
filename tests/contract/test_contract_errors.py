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

from gfs.schemas.topics import decode, topic_for_event_type

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


def _at(case_id: str, event_type: str, path: tuple[str | int, ...], value: object, says: str) -> BrokenCase:
    """`value` put at `path`, and the error points there (most cases; the others name their `loc`)."""
    return BrokenCase(case_id, event_type, _set(path, value), path, says)


def _without(case_id: str, event_type: str, path: tuple[str | int, ...], says: str) -> BrokenCase:
    """The field at `path` dropped, and the error points there."""
    return BrokenCase(case_id, event_type, _drop(path), path, says)


CASES = [
    _at("workers-zero", "TaskSubmitted", ("payload", "workers"), 0, "greater than or equal to 1"),
    _at(
        "gpus-non-positive",
        "TaskSubmitted",
        ("payload", "gpus_per_worker"),
        0,
        "greater than or equal to 0.01",
    ),
    _at(
        "gpus-below-the-granularity",
        "TaskSubmitted",
        ("payload", "gpus_per_worker"),
        1e-12,
        "greater than or equal to 0.01",
    ),
    _at(
        "workers-above-the-bound", "TaskSubmitted", ("payload", "workers"), 1025, "less than or equal to 1024"
    ),
    _at("tenant-not-a-name", "TaskSubmitted", ("payload", "tenant"), "org a/../b", "should match pattern"),
    _at("tenant-too-long", "TaskSubmitted", ("payload", "tenant"), "o" * 129, "at most 128 characters"),
    _at("gpus-fractional-above-one", "TaskSubmitted", ("payload", "gpus_per_worker"), 1.5, "whole number"),
    _at("guarantee-3h", "TaskSubmitted", ("payload", "guarantee_hours"), 3, "1, 2 or 4"),
    _at("unknown-class", "TaskSubmitted", ("payload", "task_class"), "LOW", "'HP' or 'SPOT'"),
    _without("missing-tenant", "TaskSubmitted", ("payload", "tenant"), "Field required"),
    _at("blank-task-id", "TaskSubmitted", ("payload", "task_id"), " job-1", "pattern"),
    _at("extra-payload-field", "TaskSubmitted", ("payload", "priority"), 5, "Extra inputs are not permitted"),
    _at("empty-command", "TaskSubmitted", ("payload", "command"), [], "at least 1"),
    _at("naive-occurred-at", "TaskAccepted", ("occurred_at",), "2024-08-03T09:14:28", "timezone"),
    _at("naive-started-at", "TaskStarted", ("payload", "started_at"), "2024-08-03T10:00:00", "timezone"),
    BrokenCase(
        "duplicate-worker",
        "TaskStarted",
        _set(("payload", "placements", 1, "worker_index"), 0),
        ("payload", "placements"),
        "distinct",
    ),
    _at("unknown-rejection-reason", "TaskRejected", ("payload", "reason"), "BAD", "UNKNOWN_GPU_MODEL"),
    BrokenCase(
        "period-ends-before-start",
        "GuaranteePeriodClosed",
        _set(("payload", "period_end"), "2024-08-03T11:00:00Z"),
        ("payload",),
        "period_end",
    ),
    _at(
        "utilisation-over-100",
        "NodeTelemetry",
        ("payload", "gpus", 0, "utilisation_pct"),
        120,
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
    _at("negative-std", "DemandForecast", ("payload", "horizon", 0, "std"), -1, "greater than or equal to 0"),
    BrokenCase(
        "hour-gap",
        "DemandForecast",
        _set(("payload", "horizon", 3, "hour_ahead"), 5),
        ("payload", "horizon"),
        "without gaps",
    ),
    _at(
        "negative-quota",
        "SpotQuota",
        ("payload", "quotas", 0, "quota_gpus"),
        -1,
        "greater than or equal to 0",
    ),
    BrokenCase(
        "quota-window-reversed",
        "SpotQuota",
        _set(("payload", "valid_until"), "2024-08-03T09:00:00Z"),
        ("payload",),
        "valid_until",
    ),
    _at("bad-command-id", "EvictCommand", ("payload", "command_id"), "evict-1", "UUID"),
    _at("negative-grace", "EvictCommand", ("payload", "grace_seconds"), -5, "greater than or equal to 0"),
    _at("no-victims", "EvictCommand", ("payload", "task_ids"), [], "at least 1 item"),
    _at("unknown-ack-outcome", "EvictAck", ("payload", "outcome"), "DONE", "CHECKPOINTED"),
    _at("bad-base64", "DeadLetter", ("payload", "original"), "not base64!", "base64"),
    BrokenCase(
        "event-type-mismatch",
        "TaskSubmitted",
        _set(("event_type",), "TaskCancelled"),
        ("payload", "gpu_model"),
        "Extra inputs are not permitted",
    ),
    _at(
        "unknown-event-type",
        "TaskSubmitted",
        ("event_type",),
        "TaskExploded",
        "not carried by topic 'gfs.tasks.submit'",
    ),
    _without("missing-event-type", "TaskSubmitted", ("event_type",), "must be present"),
    _at(
        "envelope-extra-field", "TaskSubmitted", ("traceparent",), "00-abc", "Extra inputs are not permitted"
    ),
    _at("schema-version-zero", "TaskSubmitted", ("schema_version",), 0, "greater than or equal to 1"),
    _without("missing-producer", "TaskSubmitted", ("producer",), "Field required"),
    _at(
        "schema-version-from-the-future",
        "SpotQuota",
        ("schema_version",),
        2,
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
    from gfs.schemas.fields import scrub_text
    from gfs.schemas.workers import WorkerExited

    scrubbed = scrub_text("exec failed\x00: \x1b[31mred\x1b[0m\tand\nnext\x7f")
    assert scrubbed == "exec failed\\x00: \\x1b[31mred\\x1b[0m\tand\nnext\\x7f"
    message = golden_message("WorkerExited")
    message["payload"]["detail"] = scrubbed
    decoded = decode(topic_for_event_type("WorkerExited").name, to_bytes(message)).payload
    assert isinstance(decoded, WorkerExited) and decoded.detail == scrubbed
