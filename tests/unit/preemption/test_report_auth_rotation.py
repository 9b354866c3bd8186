"""Issue 25 item 3, the service's side: an agent's ack or heartbeat signed under the previous
secret's node key is applied until GFS_COMMAND_SECRET_PREVIOUS_UNTIL, refused after it with a
reason of its own (`previous_key_expired`, not a forgery); one signed under a key of neither secret
is refused whatever the window. Every expectation is the rule written out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gfs.services.platform.signing import SignedMessage, node_key, sign
from gfs.services.preemption.router.report_auth import Refusal, ReportAuth
from tests.unit.preemption.test_report_auth import _messages

OLD = b"unit-rotation-old-master-secret-01"
NEW = b"unit-rotation-new-master-secret-02"
THIRD = b"unit-rotation-third-party-secret-3"
UNTIL = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)
INSIDE, AT_END, AFTER = UNTIL - timedelta(minutes=5), UNTIL, UNTIL + timedelta(microseconds=1)


def _auth(current: bytes, previous: bytes | None, until: datetime | None, wall: datetime) -> ReportAuth:
    return ReportAuth(
        lambda node: node_key(current, node),
        previous_key_of=None if previous is None else (lambda node: node_key(previous, node)),
        previous_until=until, wall_clock=lambda: wall,
    )  # fmt: skip


# (current, previous, until, wall clock, signed with) -> the refusal (None: applied)
CASES = [
    ("phase1", OLD, NEW, None, AFTER, OLD, None),
    ("phase1", OLD, NEW, None, AFTER, NEW, None),
    ("phase2-inside", NEW, OLD, UNTIL, INSIDE, OLD, None),
    ("phase2-at-end", NEW, OLD, UNTIL, AT_END, OLD, None),
    ("phase2-after", NEW, OLD, UNTIL, AFTER, OLD, Refusal.PREVIOUS_KEY_EXPIRED),
    ("phase2-after-new", NEW, OLD, UNTIL, AFTER, NEW, None),
    ("phase2-third", NEW, OLD, UNTIL, INSIDE, THIRD, Refusal.SIGNATURE_MISMATCH),
    ("phase2-third-after", NEW, OLD, UNTIL, AFTER, THIRD, Refusal.SIGNATURE_MISMATCH),
    ("phase3-old", NEW, None, None, INSIDE, OLD, Refusal.SIGNATURE_MISMATCH),
]


@pytest.mark.parametrize("message", _messages("node-r"), ids=lambda m: type(m).__name__)
@pytest.mark.parametrize(
    ("current", "previous", "until", "wall", "signer", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_previous_key_is_applied_inside_its_window_and_refused_after(
    message: SignedMessage,
    current: bytes,
    previous: bytes | None,
    until: datetime | None,
    wall: datetime,
    signer: bytes,
    expected: Refusal | None,
) -> None:
    verdict = _auth(current, previous, until, wall).check(sign(message, key=node_key(signer, "node-r")))
    assert verdict.refusal == expected and not verdict.unsigned


def test_an_expired_previous_key_says_so_in_the_dead_letter_reason() -> None:
    message = sign(_messages("node-r")[0], key=node_key(OLD, "node-r"))
    verdict = _auth(NEW, OLD, UNTIL, AFTER).check(message)
    assert verdict.why(message) == (
        "not signed by node 'node-r''s current key: signed with the previous key after its rotation "
        "window ended (accepted until 2026-12-05T01:00:00+00:00)"
    )
