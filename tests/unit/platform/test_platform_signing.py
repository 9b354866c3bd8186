"""HMAC-SHA256 command signatures: the signed bytes, sign/verify, tampering, wrong keys."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.services.platform.signing import (
    MIN_KEY_BYTES,
    SignatureCheck,
    SignatureError,
    check_signature,
    sign,
    signature_of,
    signing_bytes,
    verify,
)

KEY = b"k" * 32
OTHER_KEY = b"j" * 32
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
COMMAND_ID = UUID("00000000-0000-4000-8000-000000000001")


def evict_command(**changes: Any) -> EvictCommand:
    fields: dict[str, Any] = {
        "command_id": COMMAND_ID,
        "node": "node-7",
        "task_ids": ("job-1", "job-2"),
        "reason": EvictionReason.PREEMPTED_BY_HP,
        "grace_seconds": 30.0,
        "preemptor_task_id": "job-hp",
        "issued_at": T0,
    }
    return EvictCommand(**(fields | changes))


def bind_command(**changes: Any) -> BindCommand:
    fields: dict[str, Any] = {
        "command_id": COMMAND_ID,
        "node": "node-7",
        "task_id": "job-1",
        "task_class": TaskClass.SPOT,
        "placements": (Placement(worker_index=0, node="node-7", gpu_indices=(0, 1)),),
        "command": ("python", "train.py"),
        "checkpoint_interval_s": 600.0,
        "issued_at": T0,
    }
    return BindCommand(**(fields | changes))


# Written out by hand from the EvictCommand field order in schemas/commands.py: no spaces, the
# UUID and enum as strings, the float with its ".0", the UTC instant with "Z", signature "".
EVICT_JSON = (
    b'{"command_id":"00000000-0000-4000-8000-000000000001","node":"node-7",'
    b'"task_ids":["job-1","job-2"],"reason":"PREEMPTED_BY_HP","grace_seconds":30.0,'
    b'"preemptor_task_id":"job-hp","issued_at":"2026-03-01T12:00:00Z","signature":""}'
)


def test_signed_bytes_are_the_compact_json_with_an_empty_signature() -> None:
    assert signing_bytes(evict_command()) == EVICT_JSON
    # An existing signature is blanked, not included.
    assert signing_bytes(evict_command(signature="ab" * 32)) == EVICT_JSON


def test_signature_is_the_stdlib_hmac_of_the_hand_written_json() -> None:
    # The expected value comes from Python's hmac over the hand-written bytes, independently of
    # the module's own encoding.
    expected = hmac.new(KEY, EVICT_JSON, hashlib.sha256).hexdigest()
    assert signature_of(evict_command(), key=KEY) == expected
    assert sign(evict_command(), key=KEY).signature == expected


@pytest.mark.parametrize("build", [evict_command, bind_command], ids=["evict", "bind"])
def test_a_signed_command_verifies_and_survives_the_wire(build: Any) -> None:
    signed = sign(build(), key=KEY)
    assert check_signature(signed, key=KEY) is SignatureCheck.VALID
    # What the node agent sees: the command decoded from its JSON.
    decoded = type(signed).model_validate_json(signed.model_dump_json())
    assert verify(decoded, key=KEY)


TAMPERED_EVICT = [
    pytest.param({"node": "node-8"}, id="other-node"),
    pytest.param({"task_ids": ("job-1", "job-3")}, id="other-victims"),
    pytest.param({"task_ids": ("job-2", "job-1")}, id="victims-reordered"),
    pytest.param({"reason": EvictionReason.QUOTA_REDUCED}, id="other-reason"),
    pytest.param({"grace_seconds": 0.0}, id="no-grace"),
    pytest.param({"preemptor_task_id": None}, id="preemptor-dropped"),
    pytest.param({"issued_at": T0 + timedelta(seconds=1)}, id="reissued-later"),
    pytest.param({"command_id": UUID("00000000-0000-4000-8000-000000000002")}, id="replayed-as-new-id"),
]


@pytest.mark.parametrize("change", TAMPERED_EVICT)
def test_any_changed_field_breaks_the_signature(change: dict[str, Any]) -> None:
    signature = sign(evict_command(), key=KEY).signature
    tampered = evict_command(**change, signature=signature)
    assert check_signature(tampered, key=KEY) is SignatureCheck.MISMATCH
    assert not verify(tampered, key=KEY)


def test_a_changed_bind_placement_breaks_the_signature() -> None:
    signature = sign(bind_command(), key=KEY).signature
    moved = (Placement(worker_index=0, node="node-7", gpu_indices=(2, 3)),)
    assert check_signature(bind_command(placements=moved, signature=signature), key=KEY) is (
        SignatureCheck.MISMATCH
    )


def test_a_signature_from_another_key_is_a_mismatch() -> None:
    signed = sign(evict_command(), key=OTHER_KEY)
    assert check_signature(signed, key=KEY) is SignatureCheck.MISMATCH


@pytest.mark.parametrize(
    ("signature", "expected"),
    [
        pytest.param("", SignatureCheck.UNSIGNED, id="empty"),
        pytest.param("ab" * 31, SignatureCheck.MALFORMED, id="too-short"),
        pytest.param("ab" * 33, SignatureCheck.MALFORMED, id="too-long"),
        pytest.param("zz" * 32, SignatureCheck.MALFORMED, id="not-hex"),
        pytest.param("AB" * 32, SignatureCheck.MALFORMED, id="uppercase"),
        pytest.param("ab" * 32, SignatureCheck.MISMATCH, id="well-formed-but-wrong"),
    ],
)
def test_unsigned_and_malformed_signatures_are_told_apart(signature: str, expected: SignatureCheck) -> None:
    assert check_signature(evict_command(signature=signature), key=KEY) is expected


def test_require_valid_passes_good_commands_and_names_the_problem_otherwise() -> None:
    from gfs.services.platform.signing import require_valid

    signed = sign(bind_command(), key=KEY)
    assert require_valid(signed, key=KEY) is signed
    with pytest.raises(SignatureError, match="does not match") as caught:
        require_valid(signed, key=OTHER_KEY)
    assert caught.value.check is SignatureCheck.MISMATCH
    with pytest.raises(SignatureError, match="no signature"):
        require_valid(bind_command(), key=KEY)


@pytest.mark.parametrize(
    ("key", "error"),
    [
        pytest.param(b"", ValueError, id="empty"),
        pytest.param(b"x" * (MIN_KEY_BYTES - 1), ValueError, id="one-byte-short"),
        pytest.param("k" * 32, TypeError, id="str-not-bytes"),
    ],
)
def test_weak_or_mistyped_keys_are_refused(key: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        sign(evict_command(), key=key)
    with pytest.raises(error):
        check_signature(evict_command(signature="ab" * 32), key=key)


@given(
    key=st.binary(min_size=MIN_KEY_BYTES, max_size=64),
    grace=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    position=st.integers(min_value=0, max_value=63),
)
def test_flipping_any_signature_character_is_detected(key: bytes, grace: float, position: int) -> None:
    signed = sign(evict_command(grace_seconds=grace), key=key)
    assert verify(signed, key=key)
    flipped_char = "0" if signed.signature[position] != "0" else "1"
    forged = signed.signature[:position] + flipped_char + signed.signature[position + 1 :]
    assert check_signature(signed.model_copy(update={"signature": forged}), key=key) is (
        SignatureCheck.MISMATCH
    )
