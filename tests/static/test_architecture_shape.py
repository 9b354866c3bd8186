"""The shape issue 36 asked for, kept: objects own their state (no class built as a mixin chain) and
no circle of files.

- A class under services/ or ml/ may have another project class as a base only one level deep and
  only one at a time (a variant that overrides a hook); exceptions, Protocols, enums, pydantic
  models and named tuples are taxonomies, not shared state, and do not count.
- The import graph of the modules of services/, schemas/ and ml/ has no cycle, counting every
  import in a file: at module level, under TYPE_CHECKING, inside a function (a lazy import still
  ties the two files together).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOT_STATE = {
    "Protocol", "Exception", "BaseModel", "Enum", "StrEnum", "IntEnum", "NamedTuple", "TypedDict",
    "Generic", "BaseSettings", "RuntimeError", "ValueError", "ABC",
}  # fmt: skip


def _classes() -> dict[str, tuple[str, list[str]]]:
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(REPO.glob("services/**/*.py")) + sorted(REPO.glob("ml/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                found.setdefault(node.name, (str(path.relative_to(REPO)), bases))
    return found


def test_no_class_is_built_as_a_mixin_chain() -> None:
    classes = _classes()

    def project_bases(name: str) -> list[str]:
        return [b for b in classes[name][1] if b in classes and b not in NOT_STATE and b != name]

    def depth(name: str, seen: tuple[str, ...] = ()) -> int:
        if name in seen:
            return 0
        bases = project_bases(name)
        return 1 + max(depth(b, (*seen, name)) for b in bases) if bases else 0

    chains = [
        f"{module}:{name}({', '.join(project_bases(name))})"
        for name, (module, _) in classes.items()
        if not name.endswith(("Error", "Exception", "Warning"))
        and project_bases(name)
        and (len(project_bases(name)) >= 2 or depth(name) >= 2)
    ]
    assert not chains, (
        f"classes built as mixin chains (split into collaborators that own their state): {chains}"
    )


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for top in ("services", "schemas", "ml"):
        for path in (REPO / top).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(["gfs", *parts])] = path  # the import package is gfs (gfs/__init__.py)
    return modules


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                targets = [resolve(f"{base}.{alias.name}") or resolve(base) for alias in node.names]
            graph[module] |= {t for t in targets if t is not None and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_circle_of_files() -> None:
    graph = _import_graph(_modules())
    # The graph is real: most modules import another of the project (a change of the import
    # package's name that the resolver missed would leave it empty, and no circle to find).
    assert sum(1 for targets in graph.values() if targets) > len(graph) // 2
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    # The check itself, on a made-up graph: a -> b -> c -> a is one circle; d stands alone.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
