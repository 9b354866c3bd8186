"""docs/protocol.md read as an outside implementer would: its vectors by name, the key vector, the
post-v1 fields its section 5 names, and the signed bytes by its four steps (standard library only).
Shared by the offline conformance test (test_protocol_conformance.py) and the live one
(tests/integration/test_protocol_live.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
_BLOCK = re.compile(r"```(?:json|text) vector:(?P<name>[a-z:-]+)\n(?P<body>.*?)\n```", re.DOTALL)


def vectors() -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(DOC.read_text())}


def key_vector() -> tuple[bytes, str, bytes]:
    fields = dict(line.split("=", 1) for line in vectors()["key"].splitlines())
    values = {k.strip(): v.strip() for k, v in fields.items()}
    return bytes.fromhex(values["master"]), values["node"], bytes.fromhex(values["K(node)"])


def post_v1_fields() -> list[str]:
    # The document's own sentence (section 5), not the code's constant.
    section = DOC.read_text().split("<!-- BEGIN generated: signed-fields -->", 1)[1].split("<!--", 1)[0]
    return re.findall(r"`([a-z_]+)`", section)


def documented_signed_bytes(payload_text: str) -> bytes:
    """Section 5's four steps, as an implementer in another language would write them."""
    payload = json.loads(payload_text)  # dicts keep the members' order
    payload["signature"] = ""
    for name in post_v1_fields():
        if name in payload and payload[name] is None:
            del payload[name]
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
