"""The import contracts (pyproject.toml, import-linter) and mypy --strict on the wire schemas, the
core and its per-pool runtime and the forecaster's serving path, run as part of the test suite so
CI fails when either breaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_import_contracts_are_kept() -> None:
    out = _run(str(BIN / "lint-imports"), "--no-cache")
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 broken" in out.stdout


def test_mypy_strict_on_schemas_core_and_runtime() -> None:
    # ml/inference.py pulls in the forecaster's whole serving path (load, predict, daily refit).
    # By module name: the files are imported as gfs.* (gfs/ links to the folders).
    out = _run(
        sys.executable, "-m", "mypy", "--strict", "-p", "gfs.schemas", "-p", "gfs.services.core",
        "-m", "gfs.ml.inference",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout
