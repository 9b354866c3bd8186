"""The live services a tool starts: each `python -m gfs.services ...` in its own process group
(`start_new_session`), so a stop reaches the service and whatever it spawned in its group; and the
agents' workers, which run in sessions of their own and outlive a stopped agent (a restarted agent
re-adopts them), killed when the tool's run ends."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gfs.services.platform.settings import REPO_ROOT

# How a worker the agents started is recognised: the fake task's module or its command's name.
FAKE_TASK_MARKERS = (b"fake_task", b"fake-task")


@dataclass(slots=True)
class ServiceProcess:
    """One service or agent: `args` after `python -m gfs.services`, run from the repository root with
    `env`, its output appended to `log`."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    # Interpreter options before `-m gfs.services` (a bench runs a service under cProfile).
    python_args: list[str] = field(default_factory=list)

    def start(self) -> None:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, *self.python_args, "-m", "gfs.services", *self.args],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()

    @property
    def pid(self) -> int:
        """The started process's pid (the group's leader)."""
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM to the process group (the service shuts down cleanly); does not wait."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the process group; does not wait (the agents' workers are not in it)."""
        self._signal(signal.SIGKILL)

    def wait(self, deadline: float) -> None:
        """Wait for the process until `deadline` (monotonic), then kill its group."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it is still there after `timeout_s`."""
        if self.alive():
            self.terminate()
            self.wait(time.monotonic() + timeout_s)

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited since the poll
                os.killpg(self.proc.pid, sig)


def stop_all(procs: Iterable[ServiceProcess], timeout_s: float = 15.0) -> None:
    """SIGTERM every process group at once (they shut down in parallel), then wait; a group still
    there after `timeout_s` is killed."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.wait(deadline)


# Listening ports are drawn below the kernel's ephemeral range: a port the kernel handed out as
# free (bind to 0) is one it may hand again to an outgoing connection (a Kafka client's socket)
# before the service that was given it binds, and the service then dies with EADDRINUSE (a demo
# agent did, once in a CI-sized run with 68 agents connecting).
_LISTEN_LOW = 20000


def _ephemeral_low() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def _binds(ports: range) -> bool:
    with contextlib.ExitStack() as stack:
        for port in ports:
            probe = stack.enter_context(socket.socket())
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port_run(count: int = 1) -> int:
    """The first of `count` consecutive TCP ports free on 127.0.0.1 now, below the ephemeral range
    where there is room, for services' HTTP APIs (two runs side by side, or a run beside the
    stack's own services, must not collide)."""
    high = _ephemeral_low()
    rng = random.Random()
    if high - _LISTEN_LOW > 100 * count:
        for _ in range(500):
            base = rng.randrange(_LISTEN_LOW, high - count)
            if _binds(range(base, base + count)):
                return base
    for _ in range(200):  # no room below the ephemeral range: the kernel's choice
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count <= 65536 and _binds(range(base, base + count)):
            return base
    raise OSError(f"no {count} consecutive free ports on 127.0.0.1")


def free_port() -> int:
    """One free port (free_port_run)."""
    return free_port_run(1)


def kill_agent_workers(journals: Iterable[Path]) -> None:
    """Kill the process group of each worker the agents' journals (`<state dir>/journal.json`)
    name that still runs the fake task: the agents leave their workers running when stopped, and a
    tool's workers must not outlive its run. A pid reused by another program is left alone (its
    command line does not name the fake task), as is a journal that is missing or half-written."""
    for journal in journals:
        with contextlib.suppress(OSError, ValueError):
            for worker in json.loads(journal.read_text()).get("workers", {}).values():
                pid = worker.get("pid")
                if not pid:
                    continue
                command = b""
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    command = cmdline.read()
                if any(marker in command for marker in FAKE_TASK_MARKERS):
                    with contextlib.suppress(OSError):
                        os.killpg(int(pid), signal.SIGKILL)
