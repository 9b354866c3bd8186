"""The tools around the services (parity, demo, faults, livebench) are fenced by import contracts:
nothing the services run may import them, and each states what it may import itself.

`test_static_checks.py` runs lint-imports; this checks that the contracts for the tools exist, so
deleting one (or adding a tool package without one) fails here rather than silently widening what
the services may depend on.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("services.parity", "services.demo", "services.faults", "services.livebench", "services.whatif")
# What runs in production (or in the simulator) and so must never depend on a tool.
RUNTIME = (
    "schemas",
    "ml",
    "services.core",
    "services.simulator",
    "services.platform",
    "services.forecast",
    "services.quota",
    "services.preemption",
    "services.node_agent",
    "services.producers",
    "services.adapters",
)


def _contracts() -> list[dict[str, Any]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = data["tool"]["importlinter"]["contracts"]
    return contracts


def test_no_runtime_package_may_import_a_tool() -> None:
    fenced = {
        (source, forbidden)
        for c in _contracts()
        if c["type"] == "forbidden" and not c.get("allow_indirect_imports", False)
        for source in c["source_modules"]
        for forbidden in c["forbidden_modules"]
    }
    missing = [(s, t) for s in RUNTIME for t in TOOLS if (s, t) not in fenced]
    assert not missing, f"no forbidden contract stops these imports: {missing}"
    # A new package under services/ that is neither a runtime package nor a listed tool is a
    # decision to make (which side of the fence is it on?), not a default.
    packages = {f"services.{p.name}" for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(RUNTIME) | set(TOOLS), sorted(packages - set(RUNTIME) - set(TOOLS))


def test_each_tool_has_its_own_forbidden_contract_and_they_are_independent() -> None:
    contracts = _contracts()
    own = {s for c in contracts if c["type"] == "forbidden" for s in c["source_modules"]}
    assert set(TOOLS) <= own, f"tools without a contract of their own: {sorted(set(TOOLS) - own)}"
    independent = [set(c["modules"]) for c in contracts if c["type"] == "independence"]
    assert any(set(TOOLS) <= mods for mods in independent)


def test_each_split_tool_orders_its_parts_in_layers() -> None:
    # Issue 23 item 6: the tools split into a runner and its parts (the module docs' "Parts"); a
    # layers contract per tool keeps a part from importing its runner, so the split stays a split.
    split = ("services.parity", "services.demo", "services.faults", "services.livebench")
    layered = {box for c in _contracts() if c["type"] == "layers" for box in c.get("containers", [])}
    assert set(split) <= layered, f"tools without a layers contract: {sorted(set(split) - layered)}"
