"""One deployment per broker (services/platform/deployment.py): the id's rule, the header stamped
once, records of another deployment skipped by the consume loop before decoding (issue 38 item 5)."""

from __future__ import annotations

import pytest
from test_platform_record_processor import RecordingSink, ScriptedHandler, a_good_value, a_record

from gfs.services.platform import deployment
from gfs.services.platform.kafka.processing import ConsumeStats, RecordProcessor, RetryPolicy
from gfs.services.platform.settings import PlatformSettings

HEADER = deployment.HEADER


def test_ids_follow_their_rule() -> None:
    assert deployment.check("") == "" and deployment.check("prod-eu.1") == "prod-eu.1"
    for bad in ("-lead", "a b", "x" * 65, "é"):
        with pytest.raises(ValueError, match="GFS_DEPLOYMENT"):
            deployment.check(bad)
    with pytest.raises(ValueError, match="GFS_DEPLOYMENT"):
        PlatformSettings(gfs_deployment="not ok")


def test_a_record_is_stamped_once_and_the_default_deployment_stamps_nothing() -> None:
    trace = [("traceparent", b"00-ab")]
    assert deployment.stamped(trace, "") == trace  # the default deployment writes what it wrote before
    assert deployment.stamped(trace, "a") == [*trace, (HEADER, b"a")]
    forwarded = [(HEADER, b"a")]
    assert deployment.stamped(forwarded, "b") == forwarded  # a record's own id is kept
    assert deployment.of(None) == "" and deployment.of([(HEADER, b"a")]) == "a"
    assert deployment.of({HEADER: b"a"}) == "a" and deployment.of({}) == ""  # Faust's mapping form
    assert deployment.foreign([(HEADER, b"a")], "") and deployment.foreign([], "a")
    assert not deployment.foreign([], "") and not deployment.foreign([(HEADER, b"a")], "a")


def test_the_env_names_this_process_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GFS_DEPLOYMENT", " blue ")
    assert deployment.current() == "blue"
    monkeypatch.delenv("GFS_DEPLOYMENT")
    assert deployment.current() == ""


async def test_the_consume_loop_skips_another_deployments_records_even_malformed_ones() -> None:
    handler, sink = ScriptedHandler(), RecordingSink()
    stats = ConsumeStats()
    processor = RecordProcessor(
        sink=sink, group="g", handler=handler, retry=RetryPolicy(attempts=1, initial_backoff_s=0.0),
        producer_name="t", now=lambda: None, stats=stats, deployment="a",  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    await processor.process(a_record(a_good_value(), headers=[(HEADER, b"a")]))  # ours
    await processor.process(a_record(a_good_value(), headers=[(HEADER, b"b")], offset=6))  # theirs
    await processor.process(a_record(a_good_value(), offset=7))  # the default deployment's
    await processor.process(a_record(b"not json", headers=[(HEADER, b"b")], offset=8))  # theirs, bad
    assert [context.offset for _, context in handler.calls] == [5]
    assert (stats.foreign, stats.dead_lettered) == (3, 0) and not sink.sent
