"""HMAC-SHA256 signatures on node commands and on what agents report about their node.

Commands (BindCommand, EvictCommand) are signed by the scheduler; the agents' messages about their
node (EvictAck, WorkerStarted, WorkerExited, NodeTelemetry) are signed by the agent, under the same
per-node key, so the scheduler applies an ack only from the node it claims (issue 22 item 1).
The wire contract (schemas/commands.py, docs/protocol.md section 5): `signature` is the lowercase
hex HMAC-SHA256 of the message's compact JSON encoding with `signature` set to "" and the
`ADDED_AFTER_V1` fields left out while null (an empty signature means unsigned). One rule for every
signed type: no two of them have the same member names, so the signed bytes of one can never be
presented as another's.
"Compact JSON encoding" is pydantic's `model_dump_json()`: fields in declaration order, no
whitespace, datetimes as ISO 8601 in UTC ("...Z"). Signer and verifier must both use it; a
verifier in another language must reproduce that exact byte string.

The key is an argument, never read here: a service's settings subclass holds it and the
composition root passes it down. Verification compares digests in constant time
(`hmac.compare_digest`) so a forger cannot learn the expected signature byte by byte from timing.
"""

from __future__ import annotations

import hashlib
import hmac
import string
from enum import StrEnum
from typing import TypeVar

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, WarnCommand
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted

# Every message that carries a `signature` (the tuple is for isinstance checks).
SIGNED_TYPES = (BindCommand, EvictCommand, WarnCommand, EvictAck, WorkerStarted, WorkerExited, NodeTelemetry)
SignedMessage = (
    BindCommand | EvictCommand | WarnCommand | EvictAck | WorkerStarted | WorkerExited | NodeTelemetry
)
SignedCommand = TypeVar(
    "SignedCommand",
    BindCommand,
    EvictCommand,
    WarnCommand,
    EvictAck,
    WorkerStarted,
    WorkerExited,
    NodeTelemetry,
)

# RFC 2104 recommends keys no shorter than the hash output; 16 bytes (128 bits) is the floor we
# accept so a typo such as an unset variable expanding to "x" cannot become a usable key.
MIN_KEY_BYTES = 16
SIGNATURE_HEX_CHARS = hashlib.sha256().digest_size * 2
_LOWER_HEX = frozenset(string.digits + "abcdef")


class SignatureCheck(StrEnum):
    """The outcome of checking a message's signature; only VALID may be acted on."""

    VALID = "VALID"
    UNSIGNED = "UNSIGNED"
    MALFORMED = "MALFORMED"
    MISMATCH = "MISMATCH"

    @property
    def message(self) -> str:
        return _CHECK_MESSAGES[self]


_CHECK_MESSAGES: dict[SignatureCheck, str] = {
    SignatureCheck.VALID: "the signature matches the command and the key",
    SignatureCheck.UNSIGNED: "the message carries no signature",
    SignatureCheck.MALFORMED: f"the signature is not {SIGNATURE_HEX_CHARS} lowercase hex characters",
    SignatureCheck.MISMATCH: "the signature does not match (message altered, or signed with another key)",
}


class SignatureError(ValueError):
    """A command whose signature did not check out; `check` says why."""

    def __init__(self, command: SignedMessage, check: SignatureCheck) -> None:
        what = getattr(command, "command_id", None) or getattr(command, "sampled_at", "")
        super().__init__(
            f"refusing {type(command).__name__} {what} for node {command.node!r}: {check.message}"
        )
        self.check = check


# Domain separation for per-node keys: a node key can never equal a key derived for another
# purpose from the same master secret.
_NODE_KEY_LABEL = b"gfs/node-command-key/v1\x00"


def node_key(master: bytes, node: str) -> bytes:
    """The key that signs and verifies `node`'s commands and reports: HMAC-SHA256(master, label || node).

    One master secret lives with the scheduler; each agent is given only its own node's key, so a
    compromised node cannot forge commands for another node, nor acks or telemetry in its name.
    """
    _check_key(master)
    return hmac.new(master, _NODE_KEY_LABEL + node.encode("utf-8"), hashlib.sha256).digest()


def signing_bytes(command: SignedMessage) -> bytes:
    """The bytes the signature covers: the compact JSON of the message with signature "".

    `model_copy(update=...)` does not re-validate, which is right here: the command was validated
    when built, and only the signature (a free string) changes.
    """
    unsigned = command.model_copy(update={"signature": ""})
    # Fields added to the contract after v1 are left out while unset, so a command without them
    # signs to the same bytes as before they existed (agents and schedulers upgrade one by one).
    later = {name for name in ADDED_AFTER_V1 if getattr(command, name, None) is None}
    return unsigned.model_dump_json(exclude=later).encode("utf-8")


# Public: docs/protocol.md lists them (services/platform/protocol_doc.py renders the list).
# `running` (NodeTelemetry) is listed with them: agents' messages follow the commands' one rule.
ADDED_AFTER_V1 = ("restart_overhead_s", "attempt", "running")


def signature_of(command: SignedMessage, *, key: bytes) -> str:
    """The lowercase hex HMAC-SHA256 of `signing_bytes(command)` under `key`."""
    _check_key(key)
    return hmac.new(key, signing_bytes(command), hashlib.sha256).hexdigest()


def sign(command: SignedCommand, *, key: bytes) -> SignedCommand:
    """A copy of `command` carrying its signature (any previous signature is replaced)."""
    return command.model_copy(update={"signature": signature_of(command, key=key)})


def check_signature(command: SignedMessage, *, key: bytes) -> SignatureCheck:
    """Why `command` may or may not be trusted under `key` (never raises for a bad signature)."""
    _check_key(key)
    given = command.signature
    if not given:
        return SignatureCheck.UNSIGNED
    if len(given) != SIGNATURE_HEX_CHARS or not set(given) <= _LOWER_HEX:
        return SignatureCheck.MALFORMED
    expected = signature_of(command, key=key)
    if hmac.compare_digest(expected.encode("ascii"), given.encode("ascii")):
        return SignatureCheck.VALID
    return SignatureCheck.MISMATCH


def verify(command: SignedMessage, *, key: bytes) -> bool:
    """True only for a message signed with `key` and not altered since."""
    return check_signature(command, key=key) is SignatureCheck.VALID


def require_valid(command: SignedCommand, *, key: bytes) -> SignedCommand:
    """Return `command` when its signature is valid; raise `SignatureError` otherwise."""
    check = check_signature(command, key=key)
    if check is not SignatureCheck.VALID:
        raise SignatureError(command, check)
    return command


def _check_key(key: bytes) -> None:
    # A str key would be a caller bug (which encoding?); reject it rather than guess.
    if not isinstance(key, bytes):
        raise TypeError(f"the signing key must be bytes, not {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the signing key must be at least {MIN_KEY_BYTES} bytes (got {len(key)})")
