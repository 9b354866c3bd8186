"""The tools around the services (parity, demo, faults, livebench) are fenced by import contracts:
nothing the services run may import them, and each states what it may import itself.

`test_static_checks.py` runs lint-imports; this checks that the contracts for the tools exist, so
deleting one (or adding a tool package without one) fails here rather than silently widening what
the services may depend on.

What the tools share lives in one place, their kit (services/toolkit: starting the live services as
process groups, a free port, the agents' leftover workers, a run's consumer groups at the topics'
end, a flat forecast); issue 23 item 6 found the demo's and the fault harness's process code
near-copies, a free port written four times, and parity importing the fault harness for it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOOLS = (
    "gfs.services.parity",
    "gfs.services.demo",
    "gfs.services.faults",
    "gfs.services.livebench",
    "gfs.services.whatif",
)
# What runs in production (or in the simulator) and so must never depend on a tool.
RUNTIME = (
    "gfs.schemas",
    "gfs.ml",
    "gfs.services.core",
    "gfs.services.simulator",
    "gfs.services.platform",
    "gfs.services.forecast",
    "gfs.services.quota",
    "gfs.services.preemption",
    "gfs.services.node_agent",
    "gfs.services.producers",
    "gfs.services.adapters",
)
# The tools' kit: tool code (the services must not import it either), importing no tool itself.
TOOL_KIT = "gfs.services.toolkit"


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
    missing = [(s, t) for s in RUNTIME for t in (*TOOLS, TOOL_KIT) if (s, t) not in fenced]
    assert not missing, f"no forbidden contract stops these imports: {missing}"
    # A new package under services/ that is neither a runtime package nor a listed tool is a
    # decision to make (which side of the fence is it on?), not a default.
    folders = [p for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()]
    packages = {f"gfs.services.{p.name}" for p in folders}
    known = {*RUNTIME, *TOOLS, TOOL_KIT}
    assert packages <= known, sorted(packages - known)


def test_each_tool_has_its_own_forbidden_contract_and_they_are_independent() -> None:
    contracts = _contracts()
    own = {s for c in contracts if c["type"] == "forbidden" for s in c["source_modules"]}
    assert set(TOOLS) <= own, f"tools without a contract of their own: {sorted(set(TOOLS) - own)}"
    independent = [set(c["modules"]) for c in contracts if c["type"] == "independence"]
    assert any(set(TOOLS) <= mods for mods in independent)


def test_each_split_tool_orders_its_parts_in_layers() -> None:
    # Issue 23 item 6: the tools split into a runner and its parts (the module docs' "Parts"); a
    # layers contract per tool keeps a part from importing its runner, so the split stays a split.
    split = ("gfs.services.parity", "gfs.services.demo", "gfs.services.faults", "gfs.services.livebench")
    layered = {box for c in _contracts() if c["type"] == "layers" for box in c.get("containers", [])}
    assert set(split) <= layered, f"tools without a layers contract: {sorted(set(split) - layered)}"


def test_the_tools_share_a_kit_and_never_import_one_another() -> None:
    contracts = _contracts()
    fenced = {
        (source, forbidden)
        for c in contracts
        if c["type"] == "forbidden"
        for source in c["source_modules"]
        for forbidden in c["forbidden_modules"]
    }
    missing = [t for t in TOOLS if (TOOL_KIT, t) not in fenced]
    assert not missing, f"the kit may import these tools (it must import none): {missing}"
    independent = [c for c in contracts if c["type"] == "independence" and set(TOOLS) <= set(c["modules"])]
    excused = [i for c in independent for i in c.get("ignore_imports", [])]
    assert independent and not excused, f"one tool imports another (share through {TOOL_KIT}): {excused}"


def _tool_modules() -> list[tuple[str, ast.Module]]:
    found = []
    for tool in TOOLS:
        for path in sorted((ROOT / tool.replace(".", "/")).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            found.append((name, ast.parse(path.read_text(), filename=name)))
    return found


def _copies_free_port(node: ast.AST) -> bool:
    # `socket.bind(("127.0.0.1", 0))`: a free port picked by the kernel (toolkit.processes.free_port).
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "bind"):
        return False
    address = node.args[0] if node.args else None
    return (
        isinstance(address, ast.Tuple)
        and len(address.elts) == 2
        and isinstance(address.elts[1], ast.Constant)
        and address.elts[1].value == 0
    )


def _launches_a_service(node: ast.AST) -> bool:
    # `subprocess.Popen([sys.executable, "-m", "gfs.services", ...])`: toolkit.processes.ServiceProcess.
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Popen"
    ):
        return False
    argv = node.args[0] if node.args else None
    if not isinstance(argv, ast.List | ast.Tuple) or len(argv.elts) < 3:
        return False
    head = argv.elts[:3]
    return (
        isinstance(head[0], ast.Attribute)
        and head[0].attr == "executable"
        and [getattr(e, "value", None) for e in head[1:]] == ["-m", "gfs.services"]
    )


def _names_the_fake_task(node: ast.AST) -> bool:
    # Finding the agents' workers by their command line: toolkit.processes.kill_agent_workers.
    return isinstance(node, ast.Constant) and node.value in (b"fake_task", b"fake-task")


def test_no_tool_copies_the_kit() -> None:
    # What the checks must catch, and a launch they leave alone (a profiler in front of the module).
    def first(src: str) -> ast.AST:
        statement = ast.parse(src).body[0]
        assert isinstance(statement, ast.Expr)
        return statement.value

    assert _copies_free_port(first('probe.bind(("127.0.0.1", 0))'))
    assert _launches_a_service(
        first('subprocess.Popen([sys.executable, "-m", "gfs.services", *args], cwd=R)')
    )
    assert not _launches_a_service(
        first('subprocess.Popen([sys.executable, *profiler, "-m", "gfs.services"])')
    )
    checks = {
        "picks a free port (toolkit.processes.free_port)": _copies_free_port,
        "launches `python -m gfs.services` itself (toolkit.processes.ServiceProcess)": _launches_a_service,
        "finds the agents' workers itself (toolkit.processes.kill_agent_workers)": _names_the_fake_task,
    }
    found = [
        f"{name}:{node.lineno}: {what}"
        for name, tree in _tool_modules()
        for node in ast.walk(tree)
        for what, check in checks.items()
        if check(node)
    ]
    assert not found, "a tool copies the kit (services/toolkit); use it instead:\n" + "\n".join(found)
