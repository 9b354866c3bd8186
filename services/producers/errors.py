"""The errors `GfsClient` (services/producers/client.py) raises: an unreachable or silent broker
(`KafkaUnavailableError`), a refused principal (`KafkaAccessDeniedError`, which retrying does not
cure), and a call outside `async with` (`ClientNotStartedError`)."""

from __future__ import annotations


class GfsClientError(RuntimeError):
    """Base class of the client's own errors."""


class KafkaUnavailableError(GfsClientError):
    """The broker could not be reached, or did not acknowledge a record in time."""


class KafkaAccessDeniedError(KafkaUnavailableError):
    """The broker refused this client's principal (wrong password, or an ACL that does not let it
    write/read the topic): retrying will not help; the credentials or the ACLs must change."""


class ClientNotStartedError(GfsClientError):
    """A method that needs the broker was called outside `async with GfsClient(...)`."""
