"""`gfs schemas` commands: topics-yaml --check guards the checked-in file; list shows the registry."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gfs.schemas.topics import TOPICS
from gfs.services.platform.schema_cli import DEFAULT_TOPICS_YAML, app, render_topics_yaml


def test_check_passes_on_the_checked_in_topics_yaml() -> None:
    result = CliRunner().invoke(app, ["topics-yaml", "--check", "--output", str(DEFAULT_TOPICS_YAML)])
    assert result.exit_code == 0, result.output


def test_check_fails_on_a_stale_file_and_writing_fixes_it(tmp_path: Path) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(render_topics_yaml().replace("partitions: 3", "partitions: 2", 1))
    runner = CliRunner()
    assert runner.invoke(app, ["topics-yaml", "--check", "--output", str(path)]).exit_code == 1
    assert runner.invoke(app, ["topics-yaml", "--output", str(path)]).exit_code == 0
    assert runner.invoke(app, ["topics-yaml", "--check", "--output", str(path)]).exit_code == 0


def test_check_fails_when_the_file_is_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["topics-yaml", "--check", "--output", str(tmp_path / "none.yaml")])
    assert result.exit_code == 1


def test_list_prints_every_topic() -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for spec in TOPICS:
        assert spec.name in result.output
