"""The migrations ship as package data: a non-editable install (a wheel, installed away from the
checkout) still finds every one of them, byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gfs.services.platform.migrations import discover

REPO = Path(__file__).resolve().parents[3]


def test_a_wheel_installed_elsewhere_finds_the_same_migrations(tmp_path: Path) -> None:
    wheels, site, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "source"
    # Build from a copy: setuptools writes build/ and egg-info next to the sources it builds.
    for name in ("pyproject.toml", "README.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, source / name)
    for package in ("gfs", "schemas", "services", "ml"):  # gfs/ links to the three (kept as links)
        shutil.copytree(
            REPO / package, source / package, symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "artifacts"),
        )  # fmt: skip
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", str(source), "-w", str(wheels)], check=True
    )
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    # One import package (issue 38 item 6): the install adds gfs and its metadata, nothing else.
    # (bin/ holds the `gfs` program; what is importable is a folder with an __init__ or a module.)
    importable = sorted(
        p.name for p in site.iterdir() if (p / "__init__.py").is_file() or p.suffix in (".py", ".so")
    )
    assert importable == ["gfs"], importable
    assert {p.name for p in (site / "gfs").iterdir() if p.is_dir()} >= {"services", "schemas", "ml"}
    assert not any(p.is_symlink() for p in (site / "gfs").iterdir()), "the wheel holds real folders"
    probe = "\n".join(
        [
            "import gfs.services.platform.migrations as m",
            f"assert not m.__file__.startswith({str(REPO)!r}), m.__file__",
            "print(' '.join(f'{x.label} {x.checksum}' for x in m.discover()))",
        ]
    )
    # Run away from the checkout with only the installed copy on the path.
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n{probe}"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    shipped = [f"{m.label} {m.checksum}" for m in discover()]
    assert len(shipped) >= 2
    assert " ".join(out) == " ".join(shipped)
