"""The forecast stream's Kafka credentials: the platform's `KafkaSecurity` in Faust's terms.

Faust builds its own aiokafka producer, consumers and topic-creating client from the app's
`broker_credentials` (faust.transport.drivers.aiokafka.credentials_to_aiokafka_auth), not from
aiokafka keyword arguments, so the one setting every service reads (KAFKA_SECURITY_PROTOCOL,
KAFKA_SASL_*, KAFKA_SSL_CAFILE; services/platform/kafka_security.py) is translated here, once,
and nothing re-reads the environment. The translation is chosen so that Faust hands aiokafka the
same keyword arguments `KafkaSecurity.client_kwargs()` gives the other services' clients
(tests/unit/forecast check that equality), including the TLS context with hostname checking.
"""

from __future__ import annotations

import faust
from faust.types.auth import CredentialsT

from gfs.services.platform.kafka_security import KafkaSecurity


def broker_credentials(security: KafkaSecurity) -> CredentialsT | None:
    """Faust credentials for `security`; None in plaintext (Faust's default: no TLS, no SASL)."""
    if security.plaintext:
        return None
    if not security.uses_sasl:  # SSL: TLS only, the broker sees no user
        return faust.SSLCredentials(security.ssl_context())
    assert security.password is not None  # KafkaSecurity refuses SASL without one
    # SASLCredentials is SASL_SSL when given a context and SASL_PLAINTEXT without; its repr shows
    # the username only, so a Faust log of the app's settings never prints the password.
    return faust.SASLCredentials(
        username=security.username,
        password=security.password.get_secret_value(),
        ssl_context=security.ssl_context(),
        mechanism=security.sasl_mechanism,
    )
