"""Test modules have unique file names across tests/: pytest imports them by basename (its default
"prepend" import mode with rootdir-relative sys.path entries and no packages), so two modules called
`test_x.py` in different folders cannot be collected in one run ("import file mismatch"). Running
one folder at a time hides the clash; the whole suite (CI) stops at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_unique_file_name() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted(TESTS.rglob("test_*.py")):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each (pytest imports test modules by file name): {clashes}"
