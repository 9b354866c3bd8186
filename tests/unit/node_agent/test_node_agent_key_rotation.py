"""Issue 25 item 3: an agent accepts commands under its current key, or under the previous one
until GFS_COMMAND_SECRET_PREVIOUS_UNTIL; after that instant the previous key is refused with a
reason of its own. Signs its acks with the current key only.

Fixed vectors, computed with OpenSSL, not with the code under test (EVICT_JSON of
test_node_agent_security.py, no newline):
  OLD master 'test-master-secret-0123456789abcdef': node-7 key and signature as in that module.
  NEW master 'test-master-secret-NEW-0123456789':
    printf 'gfs/node-command-key/v1\\000node-7' \\
      | openssl dgst -sha256 -hmac 'test-master-secret-NEW-0123456789'   -> NEW_NODE_7_KEY_HEX
    openssl dgst -sha256 -mac HMAC -macopt hexkey:<NEW_NODE_7_KEY_HEX> evict.json -> NEW_SIGNATURE
  A third key, the 32 ASCII bytes 'third-party-key-not-any-secret!!':
    openssl dgst -sha256 -mac HMAC -macopt hexkey:<its hex> evict.json -> THIRD_SIGNATURE
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.services.node_agent.security import CommandGuard, Rejection
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.node_agent.virtual import VirtualNodes
from gfs.services.node_agent.worker_env import worker_environment
from gfs.services.platform.signing import SignatureCheck, check_signature
from tests.unit.node_agent.conftest import KEY, agent_guard, evict, start_agent
from tests.unit.node_agent.test_node_agent_security import (
    EVICT_SIGNATURE,
    MASTER,
    NODE_7_KEY_HEX,
    T0,
    evict_command,
)

NEW_MASTER = b"test-master-secret-NEW-0123456789"
NEW_NODE_7_KEY_HEX = "22cdca27a95822c02ad3acf2de1f2a5b267206b8884e7716226940d95dc494bb"
NEW_SIGNATURE = "dcbb47490d3377e4f47fc4ba9ef0de73a99e31b80078a2b300f4bc8cb967e95b"
THIRD_SIGNATURE = "99c54547beafee73ca810e04d9929b26fee2a168819d80f41e4daf43d9a30d14"
OLD_KEY = bytes.fromhex(NODE_7_KEY_HEX)
NEW_KEY = bytes.fromhex(NEW_NODE_7_KEY_HEX)
UNTIL = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)  # the rotation window ends an hour after T0
AFTER = UNTIL + timedelta(microseconds=1)
SIGNED = {"old": EVICT_SIGNATURE, "new": NEW_SIGNATURE, "third": THIRD_SIGNATURE, "unsigned": ""}


def _guard(key: bytes, previous: bytes | None, until: datetime | None, wall: datetime) -> CommandGuard:
    return CommandGuard(
        node="node-7", key=key, max_age=timedelta(seconds=300), clock_skew=timedelta(seconds=30),
        previous_key=previous, previous_until=until, wall_clock=lambda: wall,
    )  # fmt: skip


# (phase, wall clock, signed with) -> the rejection (None: acted on). Phase 1: current old,
# previous new, no end; phase 2: current new, previous old until UNTIL; phase 3: new alone.
CASES = [
    ("phase1", T0, "old", None),
    ("phase1", T0, "new", None),
    ("phase1", AFTER, "new", None),  # no end stated: still accepted
    ("phase1", T0, "third", Rejection.SIGNATURE_MISMATCH),
    ("phase1", T0, "unsigned", Rejection.UNSIGNED),
    ("phase2", T0, "new", None),
    ("phase2", T0, "old", None),
    ("phase2", UNTIL, "old", None),  # the end itself is inside the window
    ("phase2", AFTER, "old", Rejection.PREVIOUS_KEY_EXPIRED),
    ("phase2", AFTER, "new", None),
    ("phase2", T0, "third", Rejection.SIGNATURE_MISMATCH),
    ("phase2", AFTER, "third", Rejection.SIGNATURE_MISMATCH),
    ("phase3", T0, "new", None),
    ("phase3", T0, "old", Rejection.SIGNATURE_MISMATCH),
]
PHASES = {
    "phase1": (OLD_KEY, NEW_KEY, None),
    "phase2": (NEW_KEY, OLD_KEY, UNTIL),
    "phase3": (NEW_KEY, None, None),
}


@pytest.mark.parametrize(("phase", "wall", "signer", "expected"), CASES)
def test_agent_accepts_the_current_key_and_the_previous_one_inside_its_window(
    phase: str, wall: datetime, signer: str, expected: Rejection | None
) -> None:
    key, previous, until = PHASES[phase]
    # The command is fresh on the agent's own clock (T0); only the key window looks at the wall.
    assert _guard(key, previous, until, wall).check(evict_command(SIGNED[signer]), T0) == expected


def test_an_expired_previous_key_is_explained_with_the_window_end() -> None:
    guard = _guard(NEW_KEY, OLD_KEY, UNTIL, AFTER)
    command = evict_command(EVICT_SIGNATURE)
    reason = guard.check(command, T0)
    assert reason is Rejection.PREVIOUS_KEY_EXPIRED
    assert guard.explain(command, reason, T0) == (
        "signed with the previous key after its rotation window ended "
        "(accepted until 2026-03-01T13:00:00+00:00)"
    )


def test_settings_derive_the_previous_node_key_and_read_the_window_in_utc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GFS_COMMAND_SECRET", NEW_MASTER.decode())
    monkeypatch.setenv("GFS_COMMAND_SECRET_PREVIOUS", MASTER.decode())
    monkeypatch.setenv("GFS_COMMAND_SECRET_PREVIOUS_UNTIL", "2026-03-01T14:00:00+01:00")
    settings = NodeAgentSettings()
    assert settings.gfs_command_secret_previous_until == UNTIL
    assert settings.gfs_command_secret_previous_until.tzinfo == UTC
    own = settings.own_key_only("node-7")
    # Only the node's keys are kept, not either master secret.
    assert own.gfs_command_secret is None and own.gfs_command_secret_previous is None
    assert own.command_key("node-7").hex() == NEW_NODE_7_KEY_HEX
    assert own.previous_key("node-7") is not None
    assert own.previous_key("node-7").hex() == NODE_7_KEY_HEX  # type: ignore[union-attr]


def test_settings_take_a_hex_previous_node_key_and_no_rotation_means_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GFS_NODE_KEY", NEW_NODE_7_KEY_HEX)
    assert NodeAgentSettings().previous_key("node-7") is None
    monkeypatch.setenv("GFS_NODE_KEY_PREVIOUS", NODE_7_KEY_HEX)
    monkeypatch.setenv("GFS_COMMAND_SECRET_PREVIOUS_UNTIL", "")  # set but blank: no end
    settings = NodeAgentSettings()
    assert settings.previous_key("node-7") == OLD_KEY
    assert settings.gfs_command_secret_previous_until is None


def test_a_window_end_without_a_utc_offset_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GFS_COMMAND_SECRET_PREVIOUS_UNTIL", "2026-03-01T13:00:00")
    with pytest.raises(ValidationError, match="timezone"):
        NodeAgentSettings()


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[object] = []

    async def send(self, topic_name: str, envelope: object) -> None:
        self.sent.append(envelope)


@pytest.mark.parametrize(
    ("until", "signer", "expected"),
    [
        (None, "old", None),
        (datetime.now(UTC) + timedelta(hours=1), "old", None),
        (datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))), "old", Rejection.PREVIOUS_KEY_EXPIRED),
        (None, "new", None),
        (None, "third", Rejection.SIGNATURE_MISMATCH),
    ],
)
def test_virtual_nodes_accept_the_previous_secret_inside_its_window(
    until: datetime | None, signer: str, expected: Rejection | None
) -> None:
    host = VirtualNodes(
        {"node-7": ("H100", 8)}, NEW_MASTER, _Recorder(),  # type: ignore[arg-type]
        previous_secret=MASTER, previous_until=until,
    )  # fmt: skip
    host.sim_now = T0  # the command is fresh on the host's clock; the window is the wall's
    assert host.refusal(evict_command(SIGNED[signer])) == expected


def test_no_worker_inherits_the_previous_key_even_when_everything_is_allowed() -> None:
    agent_env = {
        "PATH": "/usr/bin",
        "GFS_COMMAND_SECRET_PREVIOUS": MASTER.decode(),
        "GFS_NODE_KEY_PREVIOUS": NODE_7_KEY_HEX,
        "GFS_COMMAND_SECRET_PREVIOUS_UNTIL": "2026-03-01T13:00:00Z",  # not a secret
    }
    assert worker_environment(agent_env, allow=("*",)) == {
        "PATH": "/usr/bin",
        "GFS_COMMAND_SECRET_PREVIOUS_UNTIL": "2026-03-01T13:00:00Z",
    }


async def test_virtual_nodes_act_on_a_previous_key_command_and_answer_with_the_current_key() -> None:
    recorder = _Recorder()
    host = VirtualNodes(
        {"node-7": ("H100", 8)}, NEW_MASTER, recorder,  # type: ignore[arg-type]
        previous_secret=MASTER, previous_until=None,
    )  # fmt: skip
    host.sim_now = T0
    await host.handle(evict_command(EVICT_SIGNATURE))  # signed with the old (previous) key
    (ack,) = [e.payload for e in recorder.sent]  # type: ignore[attr-defined]
    assert type(ack).__name__ == "EvictAck" and ack.command_id == evict_command().command_id
    assert check_signature(ack, key=NEW_KEY) is SignatureCheck.VALID
    assert check_signature(ack, key=OLD_KEY) is SignatureCheck.MISMATCH


async def test_the_agent_acts_on_a_previous_key_command_and_signs_its_ack_with_the_current_key(
    tmp_path: Path,
) -> None:
    # Phase 2 for this agent: signs with a new key, still accepts the old one (conftest's KEY).
    current = bytes(range(100, 132))
    rotating = replace(agent_guard(), key=current, previous_key=KEY, previous_until=None)
    harness = start_agent(tmp_path / "agent", guard=rotating)
    try:
        command = evict("job-none")  # signed with KEY
        await harness.send(command)
        await harness.until(lambda: bool(harness.sink.payloads(EvictAck)))
        (ack,) = harness.sink.payloads(EvictAck)
        assert ack.command_id == command.command_id and ack.outcome is EvictOutcome.NOT_RUNNING
        assert check_signature(ack, key=current) is SignatureCheck.VALID
        assert check_signature(ack, key=KEY) is SignatureCheck.MISMATCH
        assert not harness.agent.metrics.rejections
    finally:
        await harness.crash()
