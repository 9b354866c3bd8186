"""Reclaim warnings on the wire (issue 27 item 2): TaskReclaimWarning on the lifecycle topic and
the signed WarnCommand on gfs.commands.evict, next to (not instead of) what was there before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gfs.schemas.commands import EvictCommand, WarnCommand
from gfs.schemas.tasks import TaskReclaimWarning
from gfs.schemas.topics import EVICT_TOPIC, TASK_LIFECYCLE_TOPIC, decode, encode
from gfs.services.platform.signing import SIGNED_TYPES, node_key, sign, signing_bytes, verify

GOLDEN = Path(__file__).parent / "golden" / "v1"
MASTER = bytes(range(32))


def _payload(name: str) -> dict[str, Any]:
    return dict(json.loads((GOLDEN / f"{name}.json").read_text())["payload"])


def test_the_evict_topic_carries_both_its_commands() -> None:
    assert isinstance(decode(EVICT_TOPIC, (GOLDEN / "EvictCommand.json").read_bytes()).payload, EvictCommand)
    env = decode(EVICT_TOPIC, (GOLDEN / "WarnCommand.json").read_bytes())
    assert isinstance(env.payload, WarnCommand) and decode(EVICT_TOPIC, encode(env)) == env
    with pytest.raises(ValueError):  # not a lifecycle event
        decode(TASK_LIFECYCLE_TOPIC, (GOLDEN / "WarnCommand.json").read_bytes())


@pytest.mark.parametrize(
    "change",
    [
        {"attempt": 0},
        {"lead_s": 0.0},
        {"shortfall_gpus": 0.0},
        {"shortfall_gpus": float("inf")},
        {"extra": 1},
    ],
)
def test_a_warning_event_with_a_bad_value_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TaskReclaimWarning(**(_payload("TaskReclaimWarning") | change))


def test_a_warn_command_is_signed_for_its_node_only() -> None:
    command = WarnCommand(**_payload("WarnCommand"))
    signed = sign(command, key=node_key(MASTER, command.node))
    assert verify(signed, key=node_key(MASTER, command.node))
    assert not verify(signed, key=node_key(MASTER, "a100-node-018"))  # another node's key
    altered = signed.model_copy(update={"warned_attempt": 2})  # another run: not what was signed
    assert not verify(altered, key=node_key(MASTER, command.node))


def test_no_two_signed_types_share_their_member_names() -> None:
    # The signing rule (services/platform/signing.py): the bytes of one type are never another's.
    names = [frozenset(t.model_fields) for t in SIGNED_TYPES]
    assert len(set(names)) == len(names)
    command = WarnCommand(**_payload("WarnCommand"))
    assert b'"warned_attempt":1' in signing_bytes(command)
