"""CLI conventions (issue 26, item 8): `--output table|json` on the read-only commands an SRE
scripts, with stdout holding one JSON document; and no default that writes inside the source
checkout (defaults go to the per-user state folder, services/platform/paths.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from gfs.services.cli import build_app
from gfs.services.platform.paths import state_home
from gfs.services.platform.settings import REPO_ROOT

TRACE = REPO_ROOT / "tests" / "fixtures" / "gfs_trace_20"
# The read-only commands an SRE scripts: each takes --output/-o table|json.
READ_COMMANDS = (
    ("schemas", "list"),
    ("stack", "node-key"),
    ("trace", "stats"),
    ("forecast", "coverage"),
    ("deadletter", "list"),
    ("deadletter", "show"),
    ("explain",),
    ("quota", "show"),
    ("whatif",),
)
# Defaults that do point into the checkout, on purpose: a command whose job is to regenerate a
# checked-in file, and inputs the command only reads.
CHECKOUT_DEFAULTS_ALLOWED = {
    ("schemas", "topics-yaml", "output"),  # regenerates infra/kafka/topics.yaml
    ("schemas", "protocol", "doc"),  # regenerates docs/protocol.md
    ("schemas", "openapi", "directory"),  # regenerates docs/api/*.openapi.json
    ("parity", "run", "trace"),  # reads tests/data/parity
}


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command under `group` by its path (typer vendors its own click: duck-typed)."""
    if hasattr(group, "list_commands"):
        ctx = None
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            yield from _commands(command, (*path, name))
    else:
        yield path, group


@pytest.fixture(scope="module")
def gfs() -> Any:
    return typer.main.get_command(build_app())


def test_every_read_command_takes_output_table_or_json(gfs: Any) -> None:
    commands = dict(_commands(gfs))
    assert len(commands) > 40  # the walk reached the sub-commands
    for path in READ_COMMANDS:
        params = {p.name: p for p in commands[path].params}
        assert "output" in params, path
        option = params["output"]
        assert {"--output", "-o"} <= set(option.opts), path
        assert option.default in ("table", "Output.table") or str(option.default) == "table", path


def test_no_default_path_points_into_the_checkout_or_is_relative(gfs: Any) -> None:
    found, seen = [], 0
    for path, command in _commands(gfs):
        for param in command.params:
            default = param.default
            # A path default: a Path, or a string naming a file or folder (not a URL).
            if not isinstance(default, Path) and not (
                isinstance(default, str) and "/" in default and "://" not in default
            ):
                continue
            seen += 1
            where = Path(default)
            inside = where.is_absolute() and where.resolve().is_relative_to(REPO_ROOT)
            if (not where.is_absolute() or inside) and (*path, param.name) not in CHECKOUT_DEFAULTS_ALLOWED:
                found.append((path, param.name, str(default)))
    assert seen >= len(CHECKOUT_DEFAULTS_ALLOWED)  # the walk saw the path defaults
    assert found == []


def test_the_services_state_defaults_are_in_the_per_user_state_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gfs.services.forecast.app import ForecastServiceSettings
    from gfs.services.node_agent.settings import NodeAgentSettings

    for name in ("GFS_STATE_DIR", "XDG_STATE_HOME", "AGENT_STATE_ROOT", "FORECAST_DATADIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = tmp_path / "home" / ".local" / "state" / "gfs"
    assert state_home() == home
    assert NodeAgentSettings().agent_state_root == home / "agents"
    assert ForecastServiceSettings().forecast_datadir == home / "forecast"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert NodeAgentSettings().agent_state_root == tmp_path / "xdg" / "gfs" / "agents"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/xdg")  # invalid by the XDG rules: ignored
    assert state_home() == home
    monkeypatch.setenv("GFS_STATE_DIR", str(tmp_path / "mine"))
    assert ForecastServiceSettings().forecast_datadir == tmp_path / "mine" / "forecast"
    monkeypatch.setenv("AGENT_STATE_ROOT", str(tmp_path / "explicit"))  # an explicit one still wins
    assert NodeAgentSettings().agent_state_root == tmp_path / "explicit"


def test_help_names_the_default_folders() -> None:
    runner = CliRunner()
    for args in (["faults", "run", "--help"], ["parity", "run", "--help"], ["serve", "node-agent", "--help"]):
        result = runner.invoke(build_app(), args, env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.output
        assert "GFS_STATE_DIR" in result.output and "~/.local/state/gfs" in result.output, args
        assert ".stack/" not in result.output, args


def _stdout_json(args: list[str], env: dict[str, str] | None = None) -> Any:
    result = CliRunner().invoke(build_app(), args, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stdout is one JSON document, nothing else


def test_schemas_list_json() -> None:
    topics = {t["topic"]: t for t in _stdout_json(["schemas", "list", "-o", "json"])}
    # By hand from schemas/topics.py: submissions are keyed by task id, six partitions, kept 14 days.
    assert topics["gfs.tasks.submit"] == {
        "topic": "gfs.tasks.submit", "key": "task_id", "payloads": ["TaskSubmitted", "TaskCancelled"],
        "partitions": 6, "retention_ms": 14 * 86_400_000, "compacted": False,
    }  # fmt: skip
    bad = CliRunner().invoke(build_app(), ["schemas", "list", "--output", "xml"])
    assert bad.exit_code == 2 and "xml" in bad.output


def test_node_key_json_matches_the_plain_lines() -> None:
    env = {"GFS_COMMAND_SECRET": "0123456789abcdef0123456789abcdef"}
    keys = _stdout_json(["stack", "node-key", "n1", "n2", "--output", "json"], env)
    plain = CliRunner().invoke(build_app(), ["stack", "node-key", "n1", "n2"], env=env).stdout
    assert keys == dict(line.split(" ") for line in plain.splitlines())
    assert set(keys) == {"n1", "n2"} and all(len(k) == 64 for k in keys.values())


def test_trace_stats_json_has_the_tables_rows() -> None:
    rows = _stdout_json(["trace", "stats", "--trace", str(TRACE), "-o", "json"])
    table = CliRunner().invoke(build_app(), ["trace", "stats", "--trace", str(TRACE), "--markdown"]).stdout
    assert [r["statistic"] for r in rows] == [
        line.split("|")[1].strip() for line in table.splitlines()[2:] if line.startswith("|")
    ]
    assert all(set(r) == {"statistic", "target", "generated", "unit", "source"} for r in rows)


class _Explain(BaseHTTPRequestHandler):
    body: ClassVar[dict[str, Any]] = {"task_id": "T", "live": {"state": "queued", "message": "waits"},
            "decisions": [{"pool": "p", "task_id": "T", "kind": "queued", "at": "2026-01-01T00:00:00+00:00",
                           "dry_run": False, "detail": {}}]}  # fmt: skip

    def do_GET(self) -> None:  # http.server's name
        data = json.dumps(self.body).encode()
        self.send_response(200 if self.path == self.path_ok else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    path_ok = "/explain/T"

    def log_message(self, *args: object) -> None:
        pass


class _Quotas(_Explain):
    body: ClassVar[dict[str, Any]] = {
        "A100": {"quota_gpus": {"1": 45.0, "2": 40.0, "4": 40.0}, "eta": 1.0, "version": 7,
                 "capacity_gpus": 100, "valid_until": "2026-01-01T01:00:00+00:00",
                 "forecast": {"version": "lstm:3", "fallback": True}},
        "H800": {"quota_gpus": {"1": 3.0}, "eta": 0.5, "version": 2, "capacity_gpus": 8,
                 "valid_until": "2026-01-01T01:00:00+00:00", "forecast": None},
    }  # fmt: skip
    path_ok = "/quotas"


def test_quota_show_prints_the_apis_quotas_as_a_table_or_json() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quotas)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}"
        assert _stdout_json(["quota", "show", "--api", api, "-o", "json"]) == _Quotas.body
        only = _stdout_json(["quota", "show", "--api", api, "--pool", "H800", "-o", "json"])
        assert only == {"H800": _Quotas.body["H800"]}
        table = CliRunner().invoke(build_app(), ["quota", "show", "--api", api], env={"COLUMNS": "200"})
        assert table.exit_code == 0, table.output
        a100 = next(line for line in table.stdout.splitlines() if "A100" in line)
        assert "1h: 45, 2h: 40, 4h: 40" in a100 and "lstm:3 (fallback)" in a100
        assert "none (idle fallback)" in next(line for line in table.stdout.splitlines() if "H800" in line)
    finally:
        server.shutdown()
        server.server_close()
    down = CliRunner().invoke(build_app(), ["quota", "show", "--api", api])
    assert down.exit_code == 1 and "did not answer" in down.output


def test_explain_output_json_is_the_apis_answer() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Explain)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}"
        assert _stdout_json(["explain", "T", "--api", api, "-o", "json"]) == _Explain.body
        assert _stdout_json(["explain", "T", "--api", api, "--json"]) == _Explain.body  # the old flag
    finally:
        server.shutdown()
        server.server_close()
