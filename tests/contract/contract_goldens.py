"""Access to the hand-written golden messages under tests/contract/golden/v<N>/."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

GOLDEN_ROOT = Path(__file__).parent / "golden"
SCHEMA_VERSIONS: tuple[str, ...] = tuple(sorted(p.name for p in GOLDEN_ROOT.iterdir() if p.is_dir()))


def golden_paths() -> list[Path]:
    """Every golden file of every schema version, in a stable order."""
    return sorted(GOLDEN_ROOT.glob("v*/*.json"))


def golden_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def golden_message(event_type: str, *, version: str = "v1") -> dict[str, Any]:
    """A fresh (deep-copied) dict of one golden envelope, safe to mutate in a test."""
    data: dict[str, Any] = json.loads((GOLDEN_ROOT / version / f"{event_type}.json").read_text())
    return copy.deepcopy(data)


def to_bytes(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode("utf-8")
