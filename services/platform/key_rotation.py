"""Key rotation without downtime: accept the current key, or the previous one until a stated instant.

Both sides of the node channel use it with the same two settings, so the same words mean the same
thing everywhere (docs/operations.md, "Rotating the command secret"):

- GFS_COMMAND_SECRET: the key a component signs with, and accepts.
- GFS_COMMAND_SECRET_PREVIOUS: a second key that is accepted, never signed with. During a rotation
  it holds the *other* secret: the new one while components are taught to accept it (phase 1),
  the old one while they already sign with the new one (phase 2).
- GFS_COMMAND_SECRET_PREVIOUS_UNTIL: an ISO-8601 instant with its UTC offset; after it the previous
  key is refused (counted under a reason of its own, `previous_key_expired`, so an operator can
  tell a late straggler from a forgery). Unset: no end (the start-up log says so).

Why a window at all: a secret being retired is a secret that may have leaked; with an end stated
in the configuration, forgetting phase 3 (unset PREVIOUS) does not keep the old key valid forever.

Only a signature that does not match the current key is tried against the previous one: an
unsigned or malformed one is refused for what it is, whatever the keys. The window is judged on
the verifier's wall clock, never on a controllable (simulated) clock: key expiry is a security
property of real time.

Pure: the instant `now` is passed in; nothing here reads a clock or the environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator

from gfs.services.platform.signing import SignatureCheck, SignedMessage, check_signature


def _blank_is_none(value: object) -> object:
    # `GFS_COMMAND_SECRET_PREVIOUS_UNTIL=` (set but empty, as a template leaves it) means "no end".
    return None if isinstance(value, str) and not value.strip() else value


def _in_utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


# The settings field type of GFS_COMMAND_SECRET_PREVIOUS_UNTIL (agents, virtual nodes, preemption):
# an instant without an offset is refused at start-up (whose midnight would it be?).
PreviousUntil = Annotated[AwareDatetime | None, BeforeValidator(_blank_is_none), AfterValidator(_in_utc)]


@dataclass(frozen=True, slots=True)
class RotationCheck:
    """The outcome of checking a message under the current and the previous key.

    `check` is VALID when the message may be trusted (under either key); otherwise it is the
    check under the current key. `previous` is true when it was the previous key that matched:
    accepted inside the window, refused (`expired`) after it."""

    check: SignatureCheck
    previous: bool = False
    expired: bool = False

    @property
    def accepted(self) -> bool:
        return self.check is SignatureCheck.VALID and not self.expired


def check_rotating(
    message: SignedMessage,
    *,
    key: bytes,
    previous: bytes | None = None,
    until: datetime | None = None,
    now: datetime,
) -> RotationCheck:
    """Whether `message` is signed with `key`, or with `previous` at or before `until`."""
    current = check_signature(message, key=key)
    if current is not SignatureCheck.MISMATCH or previous is None:
        return RotationCheck(current)
    if check_signature(message, key=previous) is not SignatureCheck.VALID:
        return RotationCheck(current)
    if until is not None and now > until:
        return RotationCheck(SignatureCheck.MISMATCH, previous=True, expired=True)
    return RotationCheck(SignatureCheck.VALID, previous=True)


def expired_message(until: datetime | None) -> str:
    """A log line's and a dead letter's reason for a message signed with an expired previous key."""
    when = "" if until is None else f" (accepted until {until.isoformat()})"
    return f"signed with the previous key after its rotation window ended{when}"
