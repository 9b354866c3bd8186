"""Rooms small enough to read: no module of the node agent, the platform or the preemption service
over 400 lines (issue 23: agent.py had grown to 748, mixing commands, worker supervision, eviction,
recovery and telemetry; the preemption controller to 1,187 and its service to 1,006, now split into
parts, a class per concept: controller.py's and service.py's module docs; the router's loop is
the platform's consume loop in batch mode, and how far it has heard is router_heard.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
PACKAGES = ("services/node_agent", "services/platform", "services/preemption")


def test_no_module_of_the_node_agent_the_platform_or_the_preemption_service_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    too_long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"over {MAX_LINES} lines (split by concept): {too_long}"
