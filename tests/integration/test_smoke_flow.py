"""`gfs stack smoke` against the real broker: good events handled with their trace, the malformed
one dead-lettered (read back by offset) with a reason naming the missing field, and a run that
cannot finish in time reported as failed rather than hanging."""

from __future__ import annotations

import base64
import io
import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from rich.console import Console

from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.smoke import SUBMIT_TOPIC, render_report, run_smoke

pytestmark = pytest.mark.integration


def quiet_console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200, highlight=False), buffer


async def test_smoke_flow_handles_every_good_event_and_dead_letters_the_malformed_one(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    console, log = quiet_console()
    tracer = TracerProvider().get_tracer("test-smoke")  # local provider: no global tracing state

    report = await run_smoke(
        bootstrap_servers=kafka_bootstrap, tasks=7, tracer=tracer, console=console, timeout_s=60.0
    )

    assert report.failures() == (), log.getvalue()
    assert (report.sent, report.handled, report.handled_with_trace) == (7, 7, 7)
    assert not report.timed_out
    assert report.went_on_after_malformed
    letter = report.dead_letter
    assert letter is not None and report.dead_letter_at is not None
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (
        SUBMIT_TOPIC,
        *report.malformed_at,
    )
    assert letter.consumer_group == report.group
    assert "payload.workers: Field required" in letter.error, letter.error
    original = json.loads(base64.b64decode(letter.original))
    assert original["event_type"] == "TaskSubmitted" and "workers" not in original["payload"]
    assert report.trace_id in log.getvalue()  # the traceparent headers were printed

    render_report(report, console)
    assert f"smoke OK trace id {report.trace_id}" in log.getvalue()


async def test_a_smoke_run_that_cannot_finish_in_time_reports_failure(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    console, log = quiet_console()
    # No time at all: the deadline passes at the consumer's first await, so nothing can be handled
    # (10 ms, used before, sometimes sufficed on a warm broker). The run must come back, not hang,
    # and say what was missing.
    report = await run_smoke(
        bootstrap_servers=kafka_bootstrap,
        tasks=2,
        tracer=TracerProvider().get_tracer("test-smoke"),
        console=console,
        timeout_s=0.0,
    )

    assert report.timed_out
    assert not report.ok
    failures = " | ".join(report.failures())
    assert "timed out" in failures
    assert "handled 0 of 2 good events" in failures
    assert "no dead letter read back" in failures
    render_report(report, console)
    assert "FAIL" in log.getvalue()
