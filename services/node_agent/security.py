"""Which commands the agent may act on: addressed to this node, signed with its key, fresh.

Checks run in that order, so a forged command that is also old counts as forged (the reason that
matters), and freshness is judged on the *signed* `issued_at` only (an attacker cannot refresh a
captured command without breaking its signature). Nothing here raises for a bad command: the
caller logs the reason and counts it in `gfs_agent_commands_rejected_total{reason}`.

A rejected command's id is never recorded as seen: otherwise a forged command could claim the id
of a real one yet to come and make the agent skip it as a repeat.

During a key rotation (services/platform/key_rotation.py) the guard also holds the previous key and
until when it is accepted; a command signed with it after that is refused as
`previous_key_expired`, not as a forgery. The window is judged on the wall clock (`wall_clock`),
not on the agent's simulated time in topic-clock mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from gfs.schemas.commands import BindCommand, EvictCommand, WarnCommand
from gfs.services.platform.key_rotation import RotationCheck, check_rotating, expired_message
from gfs.services.platform.signing import SignatureCheck


class Rejection(StrEnum):
    """The `reason` label of gfs_agent_commands_rejected_total."""

    WRONG_NODE = "wrong_node"  # keyed to this node but addressed to another (misrouted or altered)
    UNSIGNED = "unsigned"
    MALFORMED_SIGNATURE = "malformed_signature"
    SIGNATURE_MISMATCH = "signature_mismatch"  # forged (other key) or tampered (altered after signing)
    PREVIOUS_KEY_EXPIRED = "previous_key_expired"  # signed with the previous key after its window
    STALE = "stale"  # issued longer ago than the window
    FUTURE = "future"  # issued further ahead than the allowed clock skew
    UNDECODABLE = "undecodable"  # not a valid command at all (also dead-lettered)


_SIGNATURE_REJECTIONS = {
    SignatureCheck.UNSIGNED: Rejection.UNSIGNED,
    SignatureCheck.MALFORMED: Rejection.MALFORMED_SIGNATURE,
    SignatureCheck.MISMATCH: Rejection.SIGNATURE_MISMATCH,
}


def signature_rejection(signature: RotationCheck) -> Rejection | None:
    """Why a command with this signature is refused (None: it may be trusted)."""
    if signature.expired:
        return Rejection.PREVIOUS_KEY_EXPIRED
    if signature.check is not SignatureCheck.VALID:
        return _SIGNATURE_REJECTIONS[signature.check]
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandGuard:
    node: str
    key: bytes
    max_age: timedelta
    clock_skew: timedelta
    # GFS_COMMAND_SECRET_PREVIOUS's node key (or GFS_NODE_KEY_PREVIOUS), accepted, never signed
    # with, until `previous_until` (None: no end).
    previous_key: bytes | None = None
    previous_until: datetime | None = None
    wall_clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def signature(self, command: BindCommand | EvictCommand | WarnCommand) -> RotationCheck:
        """The command's signature under this node's current and previous key."""
        return check_rotating(
            command, key=self.key, previous=self.previous_key, until=self.previous_until,
            now=self.wall_clock(),
        )  # fmt: skip

    def check(self, command: BindCommand | EvictCommand | WarnCommand, now: datetime) -> Rejection | None:
        """None when the command may be acted on, else why not."""
        if command.node != self.node:
            return Rejection.WRONG_NODE
        rejection = signature_rejection(self.signature(command))
        if rejection is not None:
            return rejection
        if command.issued_at < now - self.max_age:
            return Rejection.STALE
        if command.issued_at > now + self.clock_skew:
            return Rejection.FUTURE
        return None

    def explain(
        self, command: BindCommand | EvictCommand | WarnCommand, reason: Rejection, now: datetime
    ) -> str:
        """A log line's worth of why (never the key or the expected signature)."""
        if reason is Rejection.WRONG_NODE:
            return f"addressed to node {command.node!r}, this agent is {self.node!r}"
        if reason in (Rejection.STALE, Rejection.FUTURE):
            age = (now - command.issued_at).total_seconds()
            return (
                f"issued_at {command.issued_at.isoformat()} is {age:.1f} s old; accepted window is "
                f"-{self.clock_skew.total_seconds():g} s .. {self.max_age.total_seconds():g} s"
            )
        signature = self.signature(command)
        if signature.expired:
            return expired_message(self.previous_until)
        return signature.check.message
