"""One import package, `gfs` (issue 38 item 6): nothing of the project imports, runs or names the
old top-level packages (`services`, `schemas`, `ml`). In a source checkout those still import (the
folders are on the path when the checkout is the working directory), and a module imported under
both names is two modules: two copies of its state, and classes that are not each other."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OLD = {"services", "schemas", "ml"}
sys.path.insert(0, str(ROOT / "scripts"))
from namespace_imports import rewrite  # noqa: E402  (scripts/ is not a package)


def _python_files() -> list[Path]:
    # rglob does not enter gfs/'s links (Python < 3.13 never follows a linked folder): each file once.
    tops = ("services", "schemas", "ml", "tests", "scripts", "gfs")
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def test_gfs_links_to_the_three_folders() -> None:
    for name in OLD:
        link = ROOT / "gfs" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), link


def test_no_import_of_an_old_top_level_package() -> None:
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in OLD]
    assert not found, found


def test_the_rewrite_leaves_nothing_to_rewrite() -> None:
    """Module names in strings (`-m`, monkeypatch targets, logger names, lazy imports) too: the
    rewrite script is idempotent, so a file it would still change names an old module."""
    files = [p for p in _python_files() if p != Path(__file__).resolve()]  # this file names them
    stale = [str(p.relative_to(ROOT)) for p in files if rewrite(p.read_text(), python=True) != p.read_text()]
    docs = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ROOT / "pyproject.toml"]
    stale += [str(p.relative_to(ROOT)) for p in docs if rewrite(p.read_text(), python=False) != p.read_text()]
    assert not stale, stale


def test_the_rewrite_changes_what_it_should_and_nothing_else() -> None:
    before = "\n".join(
        [
            "from services.core.pool import PoolState",
            "import schemas.topics as t",
            'run([sys.executable, "-m", "services", "serve"])',
            'monkeypatch.setattr("services.platform.settings.REPO_ROOT", x)',
            "see docs/services.md and compose['services'] and ml.no_such_module",
            "from gfs.services.cli import app",
        ]
    )
    after = rewrite(before, python=True).splitlines()
    assert after == [
        "from gfs.services.core.pool import PoolState",
        "import gfs.schemas.topics as t",
        'run([sys.executable, "-m", "gfs.services", "serve"])',
        'monkeypatch.setattr("gfs.services.platform.settings.REPO_ROOT", x)',
        "see docs/services.md and compose['services'] and ml.no_such_module",
        "from gfs.services.cli import app",
    ]
