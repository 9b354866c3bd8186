"""Rewrite references to the old top-level packages (`services`, `schemas`, `ml`) as the namespaced
ones (`gfs.services`, `gfs.schemas`, `gfs.ml`): the one-time move of issue 38 item 6, kept for
forks and plug-ins with code of their own that imports the old names.

    python scripts/namespace_imports.py PATH...   # files or folders; rewrites in place

What it rewrites:
- `from services... import`, `import schemas...` statements (Python files);
- dotted names that name a module of the checkout, or an attribute of one (`gfs.services.core.pool`,
  "gfs.services.platform.sql", `gfs.schemas.topics.TOPICS`), in code, strings, docs and config; a name
  counts only when its first two parts are a real module or package here, so prose such as
  "services.md" or `compose["services"]` is left alone;
- `-m gfs.services` (a command line, or `"-m", "gfs.services"` in an argument list).

It never touches SQL (landed migrations are never edited) or anything already under `gfs.`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = ("services", "schemas", "ml")
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".ini", ".txt", ""}
SKIP_PARTS = {".git", ".venv", "__pycache__", ".stack", "node_modules", "gfs.egg-info", "build"}

_FROM = re.compile(r"^(\s*)from (services|schemas|ml)(?=[. ])", re.MULTILINE)
_IMPORT = re.compile(r"^(\s*)import (services|schemas|ml)(?=[.\s]|$)", re.MULTILINE)
_DOTTED = re.compile(r"(?<![\w./-])(services|schemas|ml)((?:\.[A-Za-z_]\w*)+)")
_MODULE_FLAG = re.compile(r"""(-m\s+|"-m",\s*"|'-m',\s*')(services|schemas|ml)(?=[\s"'`]|$)""", re.MULTILINE)


def _is_module(root: str, first: str) -> bool:
    base = ROOT / root / first
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _dotted(match: re.Match[str]) -> str:
    root, rest = match.group(1), match.group(2)
    first = rest[1:].split(".", 1)[0]
    return f"gfs.{root}{rest}" if _is_module(root, first) else match.group(0)


def rewrite(text: str, python: bool) -> str:
    if python:
        text = _FROM.sub(r"\1from gfs.\2", text)
        text = _IMPORT.sub(r"\1import gfs.\2", text)
    text = _MODULE_FLAG.sub(r"\1gfs.\2", text)
    return _DOTTED.sub(_dotted, text)


def files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in candidates:
            if SKIP_PARTS & set(p.parts) or p.is_symlink() or p.suffix == ".sql":
                continue
            if p.suffix in SUFFIXES or p.name in ("Makefile", "Dockerfile") or p.name.endswith(".Dockerfile"):
                found.append(p)
    return found


def main(argv: list[str]) -> int:
    changed = 0
    for path in files([Path(a) for a in argv] or [ROOT]):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text, python=path.suffix == ".py")
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"namespace_imports: {changed} files rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
