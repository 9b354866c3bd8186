"""The dashboard's tenant budget table (issue 27 item 3): one row per pool and budgeted tenant,
read through its `data-k` cells."""

from __future__ import annotations

import re
from typing import Any

from gfs.services.preemption.sre.dashboard import render_page


def _pool(budgets: dict[str, Any]) -> dict[str, Any]:
    why = {"hp_placeable_gpus": 0.0, "spot_head_held_by": None, "reserved_task_id": None, "reserved_nodes": 0}
    return {
        "nodes": 2, "down": [], "capacity_gpus": 4, "quota_gpus": {}, "quota_version": None,
        "quota_frozen": False, "pending_binds": 0, "hp_running": 0, "hp_queued": 0, "spot_running": 2,
        "spot_queued": 0, "why_spot_waits": why, "forecast": None, "tenant_budgets": budgets,
    }  # fmt: skip


def _page(pools: dict[str, Any]) -> str:
    data = {
        "instance": "i", "generated_at": "2026-01-01T00:00:00+00:00", "jaeger_ui_url": "http://j",
        "pools": pools, "evictions": {"total": 0, "window_s": 3600}, "decisions": [],
    }  # fmt: skip
    return render_page(data)


def _cell(page: str, key: str) -> str:
    found = re.search(rf'data-k="{re.escape(key)}">([^<]*)<', page)
    assert found is not None, key
    return found.group(1)


def test_each_budgeted_tenant_shows_its_budget_what_was_used_and_what_is_left() -> None:
    page = _page({
        "A100": _pool({"org-a": {"max_evictions": 3, "per": "day", "used": 3, "left": 0}}),
        "H800": _pool({"org-b": {"max_evictions": 2, "per": "periods", "used": 1, "left": 1}}),
    })  # fmt: skip
    assert _cell(page, "budget:A100:org-a:budget") == "3 per day"
    assert (_cell(page, "budget:A100:org-a:used"), _cell(page, "budget:A100:org-a:left")) == ("3", "0")
    assert _cell(page, "budget:H800:org-b:budget") == "2 per 100 guarantee periods"
    assert _cell(page, "budget:H800:org-b:left") == "1"
    assert "no tenant budget set" not in page


def test_without_budgets_the_table_says_so() -> None:
    assert "no tenant budget set" in _page({"A100": _pool({})})
