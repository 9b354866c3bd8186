"""The envelope producer: registry encoding, registry keys, trace-context headers.

Every send is awaited until the broker acknowledges it (acks=all, idempotent producer), because
callers rely on "send returned" meaning "durable" before they commit their own input offset
(commit-after-effects, see `gfs.services.platform.kafka.consumer`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import encode, key_of, topic
from gfs.services.platform import deployment as deployment_ids
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity, announce
from gfs.services.platform.tracing import inject_headers


class WrongTopicError(ValueError):
    """An envelope whose payload type the registry does not allow on the target topic."""


class EnvelopeProducer:
    """Publishes `Envelope`s to registry topics. Use as `async with EnvelopeProducer(...) as p`."""

    def __init__(
        self,
        *,
        bootstrap_servers: list[str] | str,
        client_id: str = "gfs",
        security: KafkaSecurity = PLAINTEXT,
        deployment: str | None = None,
    ) -> None:
        """`deployment`: the id stamped on every record (services/platform/deployment.py; None:
        GFS_DEPLOYMENT, "" stamps nothing)."""
        self._security = security
        self.deployment = deployment_ids.current() if deployment is None else deployment_ids.check(deployment)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            acks="all",
            enable_idempotence=True,
            **security.client_kwargs(),
        )

    async def __aenter__(self) -> Self:
        announce(self._security)  # every service produces: its log says once how it reaches Kafka
        await self._producer.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._producer.stop()

    async def send(
        self, topic_name: str, envelope: Envelope[Any], *, headers: Iterable[tuple[str, bytes]] = ()
    ) -> RecordMetadata:
        """Encode through the registry, key by the topic's key field, inject the current trace
        context, and wait for the broker's ack. Raises `WrongTopicError` (before any I/O) when
        the payload type does not belong on `topic_name`."""
        spec = topic(topic_name)
        if not isinstance(envelope.payload, tuple(spec.payload_types)):
            allowed = ", ".join(t.__name__ for t in spec.payload_types)
            raise WrongTopicError(
                f"{type(envelope.payload).__name__} cannot be published on {topic_name} (allowed: {allowed})"
            )
        return await self.send_raw(
            topic_name,
            value=encode(envelope),
            key=key_of(envelope),
            headers=inject_headers(headers),
        )

    async def send_raw(
        self, topic_name: str, *, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes]] = ()
    ) -> RecordMetadata:
        """Publish already-encoded bytes as-is (tests of the dead-letter path use this to put
        malformed records on a topic). Awaits the broker ack."""
        headers = deployment_ids.stamped(list(headers), self.deployment)
        return await self._producer.send_and_wait(topic_name, value=value, key=key, headers=headers)

    async def send_raw_later(
        self, topic_name: str, *, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes]] = ()
    ) -> asyncio.Future[RecordMetadata]:
        """Queue encoded bytes for publishing and return the future of the broker's ack without
        waiting for it: a loop that forwards a batch awaits all the futures once, before it
        commits the batch's offsets (records of one partition keep their order)."""
        future: asyncio.Future[RecordMetadata] = await self._producer.send(
            topic_name, value=value, key=key, headers=deployment_ids.stamped(list(headers), self.deployment)
        )
        return future
