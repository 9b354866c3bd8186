"""The smoke check's pure parts: the task mix, the malformed record, and the verdict."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.tasks import TaskClass
from gfs.schemas.topics import decode
from gfs.services.platform.kafka.dead_letter import describe_error
from gfs.services.platform.smoke import SUBMIT_TOPIC, SmokeReport, malformed_record, smoke_tasks

# Per-node GPU counts of the paper's cluster (data/gfs-v2026/README: A10 1/node, GPU-series-1
# 1, 4 or 8/node, the rest 8/node): a worker must fit on one node.
MAX_GPUS_PER_NODE = {
    "A10": 1,
    "A100-SXM4-80GB": 8,
    "A800-SXM4-80GB": 8,
    "GPU-series-1": 8,
    "GPU-series-2": 8,
    "H800": 8,
}


@pytest.mark.parametrize("count", [1, 6, 40], ids=["one", "six", "forty"])
def test_smoke_tasks_are_realistic(count: int) -> None:
    tasks = smoke_tasks("r1", count, seed=3)
    assert len({t.task_id for t in tasks}) == count
    for task in tasks:
        assert task.gpus_per_worker <= MAX_GPUS_PER_NODE[task.gpu_model]
        if task.gpus_per_worker < 1:
            assert task.gpu_model == "A10" and task.workers == 1
        if task.task_class is TaskClass.HP:
            assert task.guarantee_hours == 1 and task.checkpoint_interval_s is None
    if count >= 6:
        assert {t.gpu_model for t in tasks} == set(MAX_GPUS_PER_NODE)
        assert {t.task_class for t in tasks} == {TaskClass.HP, TaskClass.SPOT}


def test_smoke_tasks_are_reproducible_by_seed() -> None:
    assert smoke_tasks("r1", 20, seed=7) == smoke_tasks("r1", 20, seed=7)
    assert smoke_tasks("r1", 20, seed=7) != smoke_tasks("r1", 20, seed=8)


def test_the_malformed_record_fails_decoding_on_the_missing_workers_field() -> None:
    raw = malformed_record(smoke_tasks("r1", 1)[0])
    with pytest.raises(ValidationError) as caught:
        decode(SUBMIT_TOPIC, raw)
    assert "payload.workers: Field required" in describe_error(caught.value)


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MALFORMED = b'{"payload":{}}'


def good_report(**changes: Any) -> SmokeReport:
    letter = DeadLetter(
        original=base64.b64encode(MALFORMED).decode("ascii"),
        error="validation failed: payload.workers: Field required",
        source_topic=SUBMIT_TOPIC,
        source_partition=3,
        source_offset=10,
        failed_at=T0,
        consumer_group="gfs-smoke-r1",
    )
    report = SmokeReport(
        group="gfs-smoke-r1", trace_id="ab" * 16, sent=4, handled=4, handled_with_trace=4,
        foreign_handled=0, malformed=MALFORMED, malformed_at=(3, 10), dead_letter=letter,
        dead_letter_at=(0, 5), went_on_after_malformed=True, timed_out=False, elapsed_s=0.5,
    )  # fmt: skip
    return dataclasses.replace(report, **changes)


def letter_with(**changes: Any) -> DeadLetter:
    letter = good_report().dead_letter
    assert letter is not None
    return letter.model_copy(update=changes)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"timed_out": True}, "timed out", id="timed-out"),
        pytest.param({"handled": 3, "handled_with_trace": 3}, "handled 3 of 4", id="one-missing"),
        pytest.param({"handled_with_trace": 2}, "only 2/4 handled events carried trace", id="trace-lost"),
        pytest.param({"went_on_after_malformed": False}, "no good event after", id="stuck"),
        pytest.param({"dead_letter": None, "dead_letter_at": None}, "no dead letter", id="no-letter"),
        pytest.param({"dead_letter": letter_with(source_offset=11)}, "points at", id="other-offset"),
        pytest.param(
            {"dead_letter": letter_with(original=base64.b64encode(b"x").decode())},
            "does not hold the malformed bytes",
            id="other-bytes",
        ),
        pytest.param({"dead_letter": letter_with(consumer_group="g2")}, "names group", id="other-group"),
        pytest.param(
            {"dead_letter": letter_with(error="malformed JSON: x")},
            "does not name payload.workers",
            id="reason",
        ),
    ],
)
def test_each_broken_expectation_is_reported(changes: dict[str, Any], expected: str) -> None:
    assert good_report().failures() == ()
    report = good_report(**changes)
    assert not report.ok
    assert any(expected in failure for failure in report.failures()), report.failures()
