"""docs/protocol.md is enough to build a conforming agent: its vectors, rebuilt from the page alone.

The agent's own messages (EvictAck, WorkerStarted, WorkerExited, NodeTelemetry) are signed by the
same rule under the same K(node) (issue 22 item 1): their vectors are rebuilt the same way, and
the scheduler's verifier must accept each under K(node) and refuse it under another node's key.

Each check first derives the value the way an outside implementer would, from the document's
words with nothing but the standard library (and openssl), then holds the project's own code to
the same bytes: the node-key formula, the signed-bytes rule (post-v1 null members left out, every
other null kept), the HMAC, and that the project's agent would accept each vector's command.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess

import pytest
from protocol_page import DOC
from protocol_page import documented_signed_bytes as _documented_signed_bytes
from protocol_page import key_vector as _key_vector
from protocol_page import post_v1_fields as _post_v1_fields
from protocol_page import vectors as _vectors

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.protocol_doc import payload_models, regenerate
from gfs.services.platform.signing import SignatureCheck, check_signature, node_key, signing_bytes
from gfs.services.preemption.router.report_auth import Refusal, ReportAuth

_MODELS = {"bind-null-overhead": BindCommand, "bind-overhead": BindCommand, "evict": EvictCommand}
_REPORTS = {
    "evict-ack": EvictAck,
    "worker-started": WorkerStarted,
    "worker-exited": WorkerExited,
    "telemetry": NodeTelemetry,
    "telemetry-no-report": NodeTelemetry,
}


def _documented_hmac_and_openssl(key: bytes, signed: bytes) -> tuple[str, str]:
    mine = hmac.new(key, signed, hashlib.sha256).hexdigest()
    openssl = subprocess.run(
        ["openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", f"hexkey:{key.hex()}"],
        input=signed,
        capture_output=True,
        check=True,
    )
    return mine, openssl.stdout.decode().strip()


def test_the_node_key_vector_follows_the_documented_formula() -> None:
    master, node, expected = _key_vector()
    derived = hmac.new(master, b"gfs/node-command-key/v1" + b"\x00" + node.encode("utf-8"), hashlib.sha256)
    assert derived.digest() == expected
    assert node_key(master, node) == expected


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_each_command_vector_signs_as_documented(name: str) -> None:
    vectors = _vectors()
    payload_text, signed_text = vectors[f"{name}:payload"], vectors[f"{name}:signed-bytes"]
    _, _, key = _key_vector()

    signed = _documented_signed_bytes(payload_text)
    assert signed == signed_text.encode("utf-8")
    signature = json.loads(payload_text)["signature"]
    mine, openssl = _documented_hmac_and_openssl(key, signed)
    assert mine == signature
    assert openssl.endswith(signature)

    # The project's side: it writes exactly this text, signs these bytes and accepts the command.
    command = _MODELS[name].model_validate_json(payload_text)
    assert command.model_dump_json() == payload_text
    assert signing_bytes(command) == signed
    assert check_signature(command, key=key) is SignatureCheck.VALID


@pytest.mark.parametrize("name", sorted(_REPORTS))
def test_each_agent_message_vector_signs_as_documented_and_the_scheduler_accepts_only_it(name: str) -> None:
    vectors = _vectors()
    payload_text, signed_text = vectors[f"{name}:payload"], vectors[f"{name}:signed-bytes"]
    master, node, key = _key_vector()

    signed = _documented_signed_bytes(payload_text)
    assert signed == signed_text.encode("utf-8")
    signature = json.loads(payload_text)["signature"]
    mine, openssl = _documented_hmac_and_openssl(key, signed)
    assert mine == signature
    assert openssl.endswith(signature)

    # The scheduler's side: it decodes the agent's text, re-encodes it to the same bytes, and
    # applies the message only under the key of the node it names.
    message = _REPORTS[name].model_validate_json(payload_text)
    assert message.node == node
    assert message.model_dump_json() == payload_text
    assert signing_bytes(message) == signed
    assert ReportAuth(lambda n: node_key(master, n)).check(message).refusal is None
    other = ReportAuth(lambda n: node_key(master, n + "-other"))
    assert other.check(message).refusal is Refusal.SIGNATURE_MISMATCH
    unsigned = message.model_copy(update={"signature": ""})
    assert ReportAuth(lambda n: node_key(master, n)).check(unsigned).refusal is Refusal.UNSIGNED


def test_the_agent_vectors_cover_a_post_v1_null_left_out() -> None:
    vectors = _vectors()
    assert '"attempt":null' in vectors["evict-ack:payload"]
    assert '"attempt"' not in vectors["evict-ack:signed-bytes"]
    assert '"running":null' in vectors["telemetry-no-report:payload"]
    assert '"running"' not in vectors["telemetry-no-report:signed-bytes"]
    assert '"running":[' in vectors["telemetry:signed-bytes"]


def test_the_vectors_cover_both_kinds_of_null() -> None:
    # One vector drops a post-v1 null, another keeps a version-1 null: the rule's two branches.
    vectors = _vectors()
    dropped = [n for n in _post_v1_fields() if f'"{n}":null' in vectors["bind-null-overhead:payload"]]
    assert dropped and all(f'"{n}"' not in vectors["bind-null-overhead:signed-bytes"] for n in dropped)
    assert '"checkpoint_interval_s":null' in vectors["bind-overhead:signed-bytes"]
    assert '"preemptor_task_id":null' in vectors["evict:signed-bytes"]


def test_an_altered_vector_does_not_verify() -> None:
    _, _, key = _key_vector()
    text = _vectors()["evict:payload"].replace('"grace_seconds":30.0', '"grace_seconds":0.0')
    assert check_signature(EvictCommand.model_validate_json(text), key=key) is SignatureCheck.MISMATCH


def test_the_generated_tables_are_current_and_cover_every_message() -> None:
    text = DOC.read_text()
    assert regenerate(text) == text, "docs/protocol.md is stale: run `gfs schemas protocol`"
    for model in payload_models():
        assert f"#### `{model.__name__}` (on `" in text
        for field in model.model_fields:
            assert f"| `{field}` |" in text
