"""docs/protocol.md is enough to build a conforming agent: its vectors, rebuilt from the page alone.

Each check first derives the value the way an outside implementer would, from the document's
words with nothing but the standard library (and openssl), then holds the project's own code to
the same bytes: the node-key formula, the signed-bytes rule (post-v1 null members left out, every
other null kept), the HMAC, and that the project's agent would accept each vector's command.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import subprocess
from pathlib import Path

import pytest

from schemas.commands import BindCommand, EvictCommand
from services.platform.protocol_doc import payload_models, regenerate
from services.platform.signing import SignatureCheck, check_signature, node_key, signing_bytes

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
_BLOCK = re.compile(r"```(?:json|text) vector:(?P<name>[a-z:-]+)\n(?P<body>.*?)\n```", re.DOTALL)
_MODELS = {"bind-null-overhead": BindCommand, "bind-overhead": BindCommand, "evict": EvictCommand}


def _vectors() -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(DOC.read_text())}


def _key_vector() -> tuple[bytes, str, bytes]:
    fields = dict(line.split("=", 1) for line in _vectors()["key"].splitlines())
    values = {k.strip(): v.strip() for k, v in fields.items()}
    return bytes.fromhex(values["master"]), values["node"], bytes.fromhex(values["K(node)"])


def _post_v1_fields() -> list[str]:
    # The document's own sentence (section 5), not the code's constant.
    section = DOC.read_text().split("<!-- BEGIN generated: signed-fields -->", 1)[1].split("<!--", 1)[0]
    return re.findall(r"`([a-z_]+)`", section)


def _documented_signed_bytes(payload_text: str) -> bytes:
    """Section 5's four steps, as an implementer in another language would write them."""
    payload = json.loads(payload_text)  # dicts keep the members' order
    payload["signature"] = ""
    for name in _post_v1_fields():
        if name in payload and payload[name] is None:
            del payload[name]
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


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
    assert hmac.new(key, signed, hashlib.sha256).hexdigest() == signature
    openssl = subprocess.run(
        ["openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", f"hexkey:{key.hex()}"],
        input=signed,
        capture_output=True,
        check=True,
    )
    assert openssl.stdout.decode().strip().endswith(signature)

    # The project's side: it writes exactly this text, signs these bytes and accepts the command.
    command = _MODELS[name].model_validate_json(payload_text)
    assert command.model_dump_json() == payload_text
    assert signing_bytes(command) == signed
    assert check_signature(command, key=key) is SignatureCheck.VALID


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
