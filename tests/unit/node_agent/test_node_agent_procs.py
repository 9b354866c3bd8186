"""Process control on real `fake-task` children: SIGTERM -> checkpoint, start-time guard against
pid reuse, /proc parsing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gfs.services.node_agent import procs

REPO = Path(__file__).resolve().parents[3]


def _spawn(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    log = tmp_path / "worker.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = procs.spawn(
        (sys.executable, "-m", "gfs.services.node_agent.fake_task", *args), env=env, log_path=log
    )
    deadline = time.monotonic() + 10
    while "started" not in log.read_text():
        assert time.monotonic() < deadline, "the fake task did not start"
        time.sleep(0.01)
    return process


def test_a_worker_leads_its_own_group_and_checkpoints_on_sigterm(tmp_path: Path) -> None:
    process = _spawn(tmp_path, "--checkpoint-dir", str(tmp_path / "ckpt"))
    assert os.getpgid(process.pid) == process.pid != os.getpgid(0)
    ticks = procs.start_ticks(process.pid)
    assert ticks is not None and procs.is_running(process.pid, ticks)
    assert procs.signal_group(process.pid, ticks, signal.SIGTERM) is procs.SignalResult.SENT
    assert process.wait(timeout=10) == 0
    assert "checkpointed" in (tmp_path / "worker.log").read_text()
    assert (tmp_path / "ckpt" / "checkpoint.json").exists()
    # Reaped and gone: nothing to signal any more.
    assert procs.signal_group(process.pid, ticks, signal.SIGTERM) is procs.SignalResult.GONE


def test_a_worker_ignoring_sigterm_dies_by_sigkill(tmp_path: Path) -> None:
    process = _spawn(tmp_path, "--ignore-sigterm")
    ticks = procs.start_ticks(process.pid)
    assert ticks is not None
    procs.signal_group(process.pid, ticks, signal.SIGTERM)
    time.sleep(0.3)
    assert process.poll() is None
    assert "sigterm ignored" in (tmp_path / "worker.log").read_text()
    assert procs.signal_group(process.pid, ticks, signal.SIGKILL) is procs.SignalResult.SENT
    assert process.wait(timeout=10) == -signal.SIGKILL


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    # The journal says "pid P started at tick T"; the process now at P started at another tick
    # (pid reuse): the agent must leave it alone.
    process = _spawn(tmp_path)
    try:
        ticks = procs.start_ticks(process.pid)
        assert ticks is not None
        assert procs.signal_group(process.pid, ticks + 1, signal.SIGKILL) is procs.SignalResult.GONE
        assert not procs.is_running(process.pid, ticks - 1)
        time.sleep(0.1)
        assert process.poll() is None  # still alive: not signalled
    finally:
        process.kill()
        process.wait()


def test_a_zombie_counts_as_exited(tmp_path: Path) -> None:
    process = _spawn(tmp_path, "--duration", "0")
    ticks = procs.start_ticks(process.pid)
    assert ticks is not None
    deadline = time.monotonic() + 10
    while procs.is_running(process.pid, ticks):  # exited, not yet reaped: state Z
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stat = procs.read_stat(process.pid)
    assert stat is not None and stat.state == "Z"
    assert process.wait() == 0


def test_stat_parsing_and_argv() -> None:
    own = procs.read_stat(os.getpid())
    assert own is not None and own.state in "RS" and own.start_ticks > 0
    assert procs.read_stat(2**22 + 12345) is None  # above pid_max: never a process
    assert procs.argv_of("echo hi && exit 3") == ["/bin/sh", "-c", "echo hi && exit 3"]
    assert procs.argv_of(("python", "-V")) == ["python", "-V"]


def test_a_worker_is_found_by_its_environment_marker(tmp_path: Path) -> None:
    marker = f"test/{os.getpid()}/{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "GFS_AGENT_WORKER": marker}
    process = procs.spawn(
        (sys.executable, "-m", "gfs.services.node_agent.fake_task"), env=env, log_path=tmp_path / "w.log"
    )
    try:
        assert procs.find_by_marker("GFS_AGENT_WORKER", marker) == process.pid
        assert procs.find_by_marker("GFS_AGENT_WORKER", marker + "x") is None
    finally:
        process.kill()
        process.wait()
