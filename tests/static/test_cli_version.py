"""`gfs --version` prints the installed distribution's version (the one pip and bug reports name)."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from gfs.services.cli import build_app


def test_version_flag_prints_the_installed_version_and_exits_0() -> None:
    result = CliRunner().invoke(build_app(), ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"gfs {version('gfs')}"


def test_no_arguments_still_shows_the_help() -> None:
    result = CliRunner().invoke(build_app(), [])
    assert "Usage" in result.output and "simulate" in result.output
