"""The dashboard's per-task quoted survival and reclaim warnings (issue 27 item 5), read through
the decisions table's `data-k` cells, and the decision records they come from."""

from __future__ import annotations

import re
from typing import Any

from gfs.services.preemption.sre.dashboard import render_page, task_notes
from gfs.services.preemption.sre.decision_text import describe

QUOTE = {"guarantee_hours": 2, "guarantee": 0.874, "hours_1": 0.95, "hours_2": 0.874, "hours_4": 0.5}


def _row(task_id: str, kind: str, at: str, detail: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": task_id, "kind": kind, "at": at, "detail": detail}


def _cell(page: str, key: str) -> str:
    found = re.search(rf'data-k="{re.escape(key)}">([^<]*)<', page)
    assert found is not None, key
    return found.group(1)


def test_task_notes_take_the_latest_quote_and_count_the_warnings() -> None:
    warned = {"attempt": 1, "lead_s": 600.0, "shortfall_gpus": 1.5, "hp_demand": "forecast", "nodes": ["n0"]}
    notes = task_notes([
        _row("A", "accepted", "2026-01-01T00:00:00+00:00", {"class": "SPOT", "survival": QUOTE}),
        _row("B", "accepted", "2026-01-01T00:00:01+00:00", {"class": "HP", "survival": None}),
        _row("C", "accepted", "2026-01-01T00:00:02+00:00", {"class": "SPOT"}),  # before issue 27
        _row("A", "warned", "2026-01-01T00:10:00+00:00", warned),
        _row("A", "warned", "2026-01-01T00:20:00+00:00", warned | {"attempt": 2}),
    ])  # fmt: skip
    assert notes["A"] == {"survival": 0.874, "warnings": 2, "last_warned": "2026-01-01T00:20:00+00:00"}
    assert notes["B"] == notes["C"] == {"survival": None, "warnings": 0, "last_warned": None}


def test_the_decisions_table_shows_the_quote_and_the_warnings() -> None:
    decision = {"pool": "A100", "kind": "warned", "at": "2026-01-01T00:20:00.000000+00:00", "dry_run": False,
                "explanation": "x", "trace_id": None, "trace_url": None}  # fmt: skip
    data = {
        "instance": "i", "generated_at": "2026-01-01T00:00:00+00:00", "jaeger_ui_url": "http://j",
        "pools": {}, "evictions": {"total": 0, "window_s": 3600},
        "decisions": [
            decision | {"task_id": "A", "survival": 0.874, "warnings": 2, "last_warned": None},
            decision | {"task_id": "H", "kind": "accepted", "survival": None, "warnings": 0,
                        "last_warned": None},
        ],
    }  # fmt: skip
    page = render_page(data)
    assert (_cell(page, "decision:0:survival"), _cell(page, "decision:0:warnings")) == ("0.87", "2")
    assert (_cell(page, "decision:1:survival"), _cell(page, "decision:1:warnings")) == ("-", "0")


def test_the_decision_lines_say_the_quote_and_the_warning() -> None:
    assert describe("accepted", "A", {"class": "SPOT", "survival": QUOTE}) == (
        "accepted A as spot, quoted 0.87 to run its 2 h uninterrupted"
    )
    assert describe("accepted", "H", {"class": "HP", "survival": None}) == "accepted H as HP"
    detail = {"attempt": 1, "lead_s": 600.0, "shortfall_gpus": 1.5, "hp_demand": "forecast", "nodes": ["n0"]}
    assert describe("warned", "A", detail) == (
        "warned A (attempt 1) to checkpoint: HP may need 1.5 spot GPUs back within 10.0 min (forecast)"
    )
