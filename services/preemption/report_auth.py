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

Pure: no I/O, no clock; the key lookup is passed in (the shell caches derived keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from services.platform.signing import SignatureCheck, SignedMessage, check_signature


class Refusal(StrEnum):
    """The `reason` label of gfs_preemption_acks_refused_total for an unauthenticated message."""

    UNSIGNED = "unsigned"
    MALFORMED_SIGNATURE = "malformed_signature"
    # Altered after signing, or signed with another node's key (the two cannot be told apart
    # without trying every node's key, and both mean the message is not the named node's word).
    SIGNATURE_MISMATCH = "signature_mismatch"


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

    def why(self, message: SignedMessage) -> str:
        """A dead letter's and a log line's reason (never the key or the expected signature)."""
        if self.refusal is None:
            return ""
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

    def check(self, message: SignedMessage) -> Verdict:
        result = check_signature(message, key=self.key_of(message.node))
        if result is SignatureCheck.VALID:
            return Verdict(None)
        previous = self.previous_key_of
        if (
            result is SignatureCheck.MISMATCH
            and previous is not None
            and check_signature(message, key=previous(message.node)) is SignatureCheck.VALID
        ):
            return Verdict(None)
        if result is SignatureCheck.UNSIGNED and not self.require_signed:
            return Verdict(None, unsigned=True)
        return Verdict(_REFUSALS[result])
