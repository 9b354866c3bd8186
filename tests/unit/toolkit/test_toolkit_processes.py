"""The tools' kit (services/toolkit, issue 23 item 6): the agents' leftover workers are found by
their journals and command lines and killed, nothing else; a service process is stopped with
SIGTERM and killed when it does not go; the flat forecast the demo and the fault harness publish."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gfs.services.toolkit.forecasts import flat_forecast
from gfs.services.toolkit.processes import ServiceProcess, free_port, kill_agent_workers, stop_all

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=5)


def _spawn(procs: list[subprocess.Popen[bytes]], *argv: str) -> subprocess.Popen[bytes]:
    # Its own session, as the agents start their workers: its pid is its process group.
    p = subprocess.Popen([sys.executable, "-c", SLEEP, *argv], start_new_session=True)
    procs.append(p)
    return p


def _journal(path: Path, pids: list[int | None]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    workers = {f"w{i}": {"pid": pid, "task_id": f"t{i}"} for i, pid in enumerate(pids)}
    path.write_text(json.dumps({"workers": workers}))
    return path


def test_kill_agent_workers_kills_the_fake_task_workers_of_the_journals_and_nothing_else(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    worker = _spawn(spawned, "gfs.services.node_agent.fake_task")  # how the agents' workers run
    named = _spawn(spawned, "gfs", "fake-task")  # the fake task by its program's name
    other = _spawn(spawned, "train.py")  # a pid in a journal that is no fake task (reused)
    unlisted = _spawn(spawned, "fake_task")  # a fake task no journal names
    journals = [
        _journal(tmp_path / "n1" / "journal.json", [worker.pid, None, other.pid]),
        _journal(tmp_path / "n2" / "journal.json", [named.pid, 0]),
        tmp_path / "n3" / "journal.json",  # missing: the agent never wrote one
    ]
    (tmp_path / "n4").mkdir()
    (tmp_path / "n4" / "journal.json").write_text('{"workers": ')  # half-written
    journals.append(tmp_path / "n4" / "journal.json")

    kill_agent_workers(journals)

    assert worker.wait(timeout=10) == -9
    assert named.wait(timeout=10) == -9
    time.sleep(0.2)
    assert other.poll() is None
    assert unlisted.poll() is None


def test_a_service_process_stops_on_sigterm_and_is_killed_past_the_timeout(tmp_path: Path) -> None:
    # `python -m gfs.services` with no command prints its help and exits: a process that ends by itself.
    done = ServiceProcess("help", [], dict(os.environ), tmp_path / "help.log")
    done.start()
    assert done.proc is not None
    done.proc.wait(timeout=60)
    assert not done.alive()
    done.stop()  # nothing to stop: no error

    # A process that ignores SIGTERM is killed once the timeout passes.
    stubborn = ServiceProcess("stubborn", [], {}, tmp_path / "stubborn.log")
    stubborn.proc = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert stubborn.proc.stdout is not None and stubborn.proc.stdout.readline() == b"ready\n"
    began = time.monotonic()
    stop_all([stubborn], timeout_s=0.5)
    assert stubborn.proc.returncode == -9
    assert time.monotonic() - began < 10


def test_free_port_is_a_port_nothing_listens_on() -> None:
    import socket

    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))  # free: binding it works


def test_flat_forecast_is_the_same_demand_for_each_of_four_hours_from_the_hour() -> None:
    now = datetime(2024, 3, 1, 12, 34, 56, tzinfo=UTC)  # 1709251200 (March 1st) + 45296 s
    forecast = flat_forecast(
        "A100", 12.0, std=0.6, p90=12.72, model_name="demo-bootstrap", now=now, fallback=True
    )
    assert forecast.pool == "A100"
    assert forecast.origin_time == datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    assert forecast.model_name == "demo-bootstrap" and forecast.model_version == "1709296496"
    assert forecast.tenants == 1 and forecast.fallback is True
    assert [(h.hour_ahead, h.mean, h.std, dict(h.quantiles)) for h in forecast.horizon] == [
        (h, 12.0, 0.6, {"0.5": 12.0, "0.9": 12.72}) for h in (1, 2, 3, 4)
    ]
    assert flat_forecast("A100", 1.0, std=0.1, p90=1.1, model_name="faults", now=now).fallback is False
