"""Which agent messages the preemption service may apply: those signed by the node they name.

Issue 22 item 1: an ack is applied only from the node that must send it. Matching an ack to its
command (`PoolController.refusal`) stops an ack for the wrong command; it cannot stop a process
that can write the ack topics from sending a matching ack in another node's name (any id it read
from `gfs.commands.evict`). So every message an agent sends about its node (EvictAck,
WorkerStarted, WorkerExited, NodeTelemetry) carries an HMAC under that node's key
(`signing.node_key`), the key the node's commands are signed with; the service holds the master
secret and derives it. A message signed with another node's key, altered, or unsigned is refused.

Why telemetry too: its heartbeat keeps a node from being declared lost, its GPUs are the pool's
capacity, and its `running` report drives reconciliation (a report without an attempt releases
the attempt's GPUs to the HP task waiting for them); a forged one can put two tasks on one GPU
as surely as a forged ack.

Rollout (docs/decisions.md): `require_signed` off accepts an unsigned message (counted apart, so
an operator sees when every agent signs) but never a wrongly signed one: a signature present and
wrong is a forgery or a corruption whatever the rollout stage.

Rotation (services/platform/key_rotation.py): the previous secret's node keys are accepted too,
until GFS_COMMAND_SECRET_PREVIOUS_UNTIL; after it such a message is refused as
`previous_key_expired` (not as a forgery), on the wall clock.

Pure: no I/O; the key lookup and the wall clock are passed in (the shell caches derived keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from gfs.services.platform.key_rotation import check_rotating, expired_message
from gfs.services.platform.signing import SignatureCheck, SignedMessage


class Refusal(StrEnum):
    """The `reason` label of gfs_preemption_acks_refused_total for an unauthenticated message."""

    UNSIGNED = "unsigned"
    MALFORMED_SIGNATURE = "malformed_signature"
    # Altered after signing, or signed with another node's key (the two cannot be told apart
    # without trying every node's key, and both mean the message is not the named node's word).
    SIGNATURE_MISMATCH = "signature_mismatch"
    # Signed with the previous secret's node key after GFS_COMMAND_SECRET_PREVIOUS_UNTIL.
    PREVIOUS_KEY_EXPIRED = "previous_key_expired"


_REFUSALS = {
    SignatureCheck.UNSIGNED: Refusal.UNSIGNED,
    SignatureCheck.MALFORMED: Refusal.MALFORMED_SIGNATURE,
    SignatureCheck.MISMATCH: Refusal.SIGNATURE_MISMATCH,
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """`refusal` None: apply the message. `unsigned`: it was accepted without a signature (only
    while signatures are not required)."""

    refusal: Refusal | None
    unsigned: bool = False
    until: datetime | None = None  # the rotation window's end, for `why` of PREVIOUS_KEY_EXPIRED

    def why(self, message: SignedMessage) -> str:
        """A dead letter's and a log line's reason (never the key or the expected signature)."""
        if self.refusal is None:
            return ""
        if self.refusal is Refusal.PREVIOUS_KEY_EXPIRED:
            return f"not signed by node {message.node!r}'s current key: {expired_message(self.until)}"
        check = {v: k for k, v in _REFUSALS.items()}[self.refusal]
        return f"not signed by node {message.node!r}'s key: {check.message}"


@dataclass(frozen=True, slots=True)
class ReportAuth:
    key_of: Callable[[str], bytes]  # node -> its key (signing.node_key of the master secret)
    require_signed: bool = True
    # While the master secret is rotated (docs/operations.md), agents not restarted yet still sign
    # with keys of the previous secret: accepted too, or their heartbeats would stop counting and
    # their nodes be declared lost mid-rotation.
    previous_key_of: Callable[[str], bytes] | None = None
    # GFS_COMMAND_SECRET_PREVIOUS_UNTIL: after it the previous keys are refused (None: no end).
    previous_until: datetime | None = None
    wall_clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def check(self, message: SignedMessage) -> Verdict:
        previous = self.previous_key_of
        rotation = check_rotating(
            message, key=self.key_of(message.node),
            previous=None if previous is None else previous(message.node),
            until=self.previous_until, now=self.wall_clock(),
        )  # fmt: skip
        if rotation.expired:
            return Verdict(Refusal.PREVIOUS_KEY_EXPIRED, until=self.previous_until)
        result = rotation.check
        if result is SignatureCheck.VALID:
            return Verdict(None)
        if result is SignatureCheck.UNSIGNED and not self.require_signed:
            return Verdict(None, unsigned=True)
        return Verdict(_REFUSALS[result])
