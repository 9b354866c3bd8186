"""The shared platform is used, not bypassed (issue 23, item 6): topic names come only from the
registry (schemas/topics.py), dead letters are built only by the platform's publisher, and periodic
jobs run on the platform's timer. Every module of services/ is checked (the list of modules
pending a rewrite is empty since the preemption service's split and its timer moved onto the
platform's).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from gfs.schemas.topics import TOPICS

ROOT = Path(__file__).resolve().parents[2]
# Where the dead-letter envelope is built and the timer lives.
PLATFORM_DEAD_LETTERS = "services/platform/kafka/dead_letter.py"
TOPIC_NAMES = frozenset(spec.name for spec in TOPICS)
# A topic name quoted inside a longer string: SQL (`WHERE topic = 'gfs.quotas'`), a shell line.
_QUOTED = re.compile("['\"](" + "|".join(re.escape(n) for n in sorted(TOPIC_NAMES)) + ")['\"]")


@cache
def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        found.append((name, ast.parse(path.read_text(), filename=name)))
    return found


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_topic_names_come_only_from_the_registry() -> None:
    # What the quoted pattern must catch (SQL), and prose that may stay (help texts).
    assert _QUOTED.search("SELECT * FROM outbox WHERE topic = 'gfs.tasks.lifecycle'")
    assert not _QUOTED.search("the letter's offset on gfs.deadletter")
    found = []
    for name, tree in _modules():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
                continue
            if node.value in TOPIC_NAMES or _QUOTED.search(node.value):
                found.append(f"{name}:{node.lineno}: {node.value[:80]!r}")
    assert not found, "literal topic names (use the constants of gfs.schemas.topics):\n" + "\n".join(found)


def test_dead_letters_are_built_only_by_the_platform() -> None:
    found = []
    for name, tree in _modules():
        if name == PLATFORM_DEAD_LETTERS:
            continue
        for node in ast.walk(tree):
            called = node.func if isinstance(node, ast.Call) else None
            callee = getattr(called, "id", None) or getattr(called, "attr", None)
            if callee in {"build_dead_letter", "FailedRecord", "DeadLetter"}:
                found.append(f"{name}:{node.lineno}: {callee}(...)")
    assert not found, "build dead letters with DeadLetterPublisher:\n" + "\n".join(found)


def test_periodic_jobs_use_the_platform_timer() -> None:
    # A hand-written "while not stop: run; wait" loop named like a timer is the copy the platform
    # replaced (services/platform/timer.py states the one error policy).
    found = [
        f"{name}:{node.lineno}: {node.name}"
        for name, tree in _modules()
        if name != "services/platform/timer.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.AsyncFunctionDef)
        and node.name in {"_every", "every", "_periodic", "_telemetry"}
    ]
    assert not found, "use gfs.services.platform.timer.every:\n" + "\n".join(found)
