"""How a Kafka client proves who it is: plaintext for the dev stack, TLS + SASL/SCRAM in a cluster.

`KafkaSecurity` is built once from the settings (`PlatformSettings.kafka_security`: env
KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD,
KAFKA_SSL_CAFILE) and passed to the adapters (`EnvelopeProducer`, `consume`, `ensure_topics`),
which spread `client_kwargs()` into every aiokafka producer, consumer and admin client.

Plaintext stays the default so `make up`/`make demo` need no certificates; a client that connects
in plaintext says so once per process in its log (`announce`), so nobody mistakes a dev setup for
a secured one. The password is a `SecretStr`: it never appears in a repr, a log line or an error.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr

log = logging.getLogger(__name__)

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


class KafkaSecurityError(ValueError):
    """Settings that cannot make a working client (e.g. SASL without a username)."""


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: Mechanism = "SCRAM-SHA-512"
    username: str | None = None
    password: SecretStr | None = None
    # PEM file of the CA that signed the broker's certificate; None: the system's trust store.
    cafile: str | None = None

    def __post_init__(self) -> None:
        if self.uses_sasl and not (self.username and self.password and self.password.get_secret_value()):
            raise KafkaSecurityError(
                f"KAFKA_SECURITY_PROTOCOL={self.protocol} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"
            )

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def plaintext(self) -> bool:
        """Nothing on the wire is encrypted and the broker does not know who is talking."""
        return self.protocol == "PLAINTEXT"

    def describe(self) -> str:
        """One line for a startup log: protocol, mechanism and user, never the password."""
        if self.plaintext:
            return "PLAINTEXT (no TLS, no authentication: dev/demo only)"
        parts: list[str] = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.sasl_mechanism} as {self.username}")
        if self.uses_tls:
            parts.append(f"CA {self.cafile or 'system trust store'}")
        return ", ".join(parts)

    def ssl_context(self) -> ssl.SSLContext | None:
        # Hostname checking stays on (create_ssl_context's default): the broker's certificate must
        # name the address the client dialled, or a man in the middle with any CA-signed cert passes.
        return create_ssl_context(cafile=self.cafile) if self.uses_tls else None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
        if self.plaintext:
            return {}  # aiokafka's defaults: exactly what the clients did before this module
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            assert self.password is not None  # __post_init__
            kwargs |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password.get_secret_value(),
            }
        return kwargs


PLAINTEXT = KafkaSecurity()

_announced: set[KafkaSecurity] = set()


def announce(security: KafkaSecurity) -> None:
    """Log how this process talks to Kafka, once per distinct setting: a WARNING in plaintext."""
    if security in _announced:
        return
    _announced.add(security)
    if security.plaintext:
        log.warning("kafka transport: %s", security.describe())
    else:
        log.info("kafka transport: %s", security.describe())
