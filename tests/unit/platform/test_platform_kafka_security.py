"""Kafka client security from settings, and the ACL table (issue 25, item 2).

The table's expectations are written out by hand from docs/live-pipeline.md ("Services": who
consumes and produces what), not read back from the table itself.
"""

from __future__ import annotations

import logging
import ssl

import pytest
from pydantic import SecretStr

from gfs.schemas.topics import TOPICS
from gfs.services.platform.kafka import acls
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity, KafkaSecurityError, announce
from gfs.services.platform.settings import PlatformSettings


def _secure() -> KafkaSecurity:
    return KafkaSecurity(protocol="SASL_SSL", username="quota", password=SecretStr("s3cr3t-value"))


def test_plaintext_is_the_default_and_adds_nothing_to_the_clients() -> None:
    assert PlatformSettings().kafka_security == PLAINTEXT
    assert PLAINTEXT.client_kwargs() == {}
    assert PLAINTEXT.plaintext
    assert "PLAINTEXT" in PLAINTEXT.describe() and "dev/demo only" in PLAINTEXT.describe()


def test_sasl_ssl_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "preemption")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "pw-from-env")
    security = PlatformSettings().kafka_security
    kwargs = security.client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "preemption"
    assert kwargs["sasl_plain_password"] == "pw-from-env"
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED


def test_sasl_without_credentials_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "quota")
    with pytest.raises(KafkaSecurityError, match="KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"):
        _ = PlatformSettings().kafka_security


def test_the_password_is_never_in_a_repr_or_the_description() -> None:
    security = _secure()
    assert "s3cr3t-value" not in repr(security)
    assert security.describe() == "SASL_SSL, SCRAM-SHA-512 as quota, CA system trust store"


def test_announce_warns_once_in_plaintext(caplog: pytest.LogCaptureFixture) -> None:
    fresh = KafkaSecurity(protocol="PLAINTEXT", cafile="/announce-test")  # not announced before
    with caplog.at_level(logging.INFO, logger="gfs.services.platform.kafka_security"):
        announce(fresh)
        announce(fresh)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "PLAINTEXT (no TLS, no authentication" in warnings[0].getMessage()


def _writers(topic_name: str) -> set[str]:
    return {
        principal
        for rule in acls.rules(("n1", "n2"))
        if rule.resource == "topic" and rule.pattern == "literal" and topic_name in rule.names
        if "Write" in rule.operations or "All" in rule.operations
        for principal in rule.principals
    }


def _readers(topic_name: str) -> set[str]:
    return {
        principal
        for rule in acls.rules(("n1", "n2"))
        if rule.resource == "topic" and rule.pattern == "literal" and topic_name in rule.names
        if "Read" in rule.operations or "All" in rule.operations
        for principal in rule.principals
    }


def test_only_the_named_principals_write_each_registry_topic() -> None:
    agents = {"agent-n1", "agent-n2"}
    assert _writers("gfs.commands.bind") == {"preemption"}
    assert _writers("gfs.commands.evict") == {"preemption"}
    assert _writers("gfs.tasks.lifecycle") == {"preemption"}
    assert _writers("gfs.pools.status") == {"preemption"}
    assert _writers("gfs.tasks.submit") == {"producer"}
    assert _writers("gfs.commands.evict-ack") == agents
    assert _writers("gfs.commands.worker-ack") == agents
    assert _writers("gfs.nodes.telemetry") == agents
    assert _writers("gfs.control.clock-acks") == agents
    assert _writers("gfs.quotas") == {"quota"}
    assert _writers("gfs.forecasts") == {"forecast"}
    assert _writers("gfs.deadletter") == {"preemption", "quota", "forecast"} | agents
    # The replay clock is written by a driver run as the super user (admin), nobody else.
    assert _writers("gfs.control.clock") == set()


def test_readers_follow_the_pipeline() -> None:
    assert _readers("gfs.tasks.submit") == {"preemption", "forecast"}
    assert _readers("gfs.tasks.lifecycle") == {"quota", "forecast", "producer"}
    assert _readers("gfs.commands.bind") == {"agent-n1", "agent-n2"}
    assert _readers("gfs.quotas") == {"preemption"}
    assert _readers("gfs.pools.status") == {"quota"}
    assert _readers("gfs.forecasts") == {"quota"}
    assert _readers("gfs.commands.evict-ack") == {"preemption"}
    assert _readers("gfs.deadletter") == set()  # read by operators, as admin


def test_every_table_topic_is_a_registry_topic_and_groups_are_per_agent() -> None:
    registry = {spec.name for spec in TOPICS}
    for rule in acls.rules(("n1",)):
        if rule.resource == "topic" and rule.pattern == "literal":
            assert set(rule.names) <= registry, rule
    groups = [
        r for r in acls.rules(("n1", "n2")) if r.resource == "group" and r.principals[0].startswith("agent-")
    ]
    assert [(r.principals, r.names, r.pattern) for r in groups] == [
        (("agent-n1",), ("gfs-agent-n1",), "literal"),
        (("agent-n2",), ("gfs-agent-n2",), "literal"),
    ]
    assert acls.principals(("n1",)) == ("admin", "preemption", "quota", "forecast", "producer", "agent-n1")


def test_acl_args_are_one_kafka_acls_call() -> None:
    rule = acls.Rule(("agent-n1", "agent-n2"), ("Read",), "group", ("g",), "prefixed")
    assert rule.acl_args() == [
        "--resource-pattern-type", "prefixed",
        "--allow-principal", "User:agent-n1", "--allow-principal", "User:agent-n2",
        "--operation", "Read", "--group", "g",
    ]  # fmt: skip
