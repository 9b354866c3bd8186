"""The forecast stream takes the platform's Kafka security settings (issue 25, item 2).

Faust builds its aiokafka clients itself, from the app's `broker_credentials`; what reaches
aiokafka is what Faust's own driver derives from them (`credentials_to_aiokafka_auth`, used for
its consumer, producer and topic-creating client). These tests build the real app from the
environment, as `gfs serve forecast` does, and check those derived keyword arguments against
values written out by hand from the environment: the protocol, the SCRAM user and password, and a
TLS context that verifies the broker (certificate and hostname).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from gfs.services.forecast.app import ForecastServiceSettings, make_app
from gfs.services.forecast.kafka_auth import broker_credentials
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity

PASSWORD = "forecast-pw-7f3a"


def _settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> ForecastServiceSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return ForecastServiceSettings(
        forecast_artifact=None, forecast_store="memory://", forecast_datadir=tmp_path, forecast_web_port=0
    )


def _faust_kwargs(settings: ForecastServiceSettings) -> dict[str, object]:
    app = make_app(settings)
    return dict(credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context))


def test_sasl_ssl_settings_reach_fausts_clients(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = _settings(
        monkeypatch, tmp_path,
        KAFKA_SECURITY_PROTOCOL="SASL_SSL", KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
        KAFKA_SASL_USERNAME="forecast", KAFKA_SASL_PASSWORD=PASSWORD,
    )  # fmt: skip
    kwargs = _faust_kwargs(settings)
    context = kwargs.pop("ssl_context")
    assert kwargs == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "forecast",
        "sasl_plain_password": PASSWORD,
    }
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_sasl_without_tls_tls_without_sasl_and_plaintext(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sasl = _settings(
        monkeypatch, tmp_path,
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", KAFKA_SASL_MECHANISM="SCRAM-SHA-256",
        KAFKA_SASL_USERNAME="forecast", KAFKA_SASL_PASSWORD=PASSWORD,
    )  # fmt: skip
    assert _faust_kwargs(sasl) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "forecast",
        "sasl_plain_password": PASSWORD,
        "ssl_context": None,
    }
    monkeypatch.delenv("KAFKA_SASL_USERNAME")
    monkeypatch.delenv("KAFKA_SASL_PASSWORD")
    tls = _faust_kwargs(_settings(monkeypatch, tmp_path, KAFKA_SECURITY_PROTOCOL="SSL"))
    assert tls["security_protocol"] == "SSL"
    assert isinstance(tls["ssl_context"], ssl.SSLContext)
    # Plaintext (the dev stack) stays Faust's default: no credentials at all.
    monkeypatch.delenv("KAFKA_SECURITY_PROTOCOL")
    assert broker_credentials(PLAINTEXT) is None
    assert _faust_kwargs(_settings(monkeypatch, tmp_path)) == {"security_protocol": "PLAINTEXT"}


def test_the_password_is_not_in_the_credentials_repr() -> None:
    from pydantic import SecretStr

    security = KafkaSecurity(protocol="SASL_SSL", username="forecast", password=SecretStr(PASSWORD))
    credentials = broker_credentials(security)
    assert "forecast" in repr(credentials) and PASSWORD not in repr(credentials)
