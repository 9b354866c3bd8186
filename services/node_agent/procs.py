"""Starting, identifying and signalling worker processes (Linux /proc).

A pid alone does not name a process: once a process is gone and reaped, the kernel may hand its
pid to an unrelated one. The agent therefore records (pid, start time) for every worker it starts,
where the start time is field 22 of /proc/<pid>/stat (clock ticks since boot, fixed for a process's
life), and signals a worker's process group only while the group leader's pid still carries that
start time. A process the agent did not start is never in its journal, so it is never signalled.

Each worker is its own session and process-group leader (`start_new_session=True`, so pgid == pid):
a SIGTERM to the group reaches the worker's children too, and a signal meant for one worker never
reaches the agent or another worker.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

# /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may contain spaces and parentheses, so the
# fields are counted from the last ")". Field 3 (state) is the first one after it.
_STAT_STATE = 0  # field 3
_STAT_STARTTIME = 19  # field 22

SHELL = "/bin/sh"


@dataclass(frozen=True, slots=True)
class ProcStat:
    state: str
    start_ticks: int


def read_stat(pid: int, proc: Path = Path("/proc")) -> ProcStat | None:
    """State and start time of `pid`, or None when no such process exists."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcStat(state=fields[_STAT_STATE].decode("ascii"), start_ticks=int(fields[_STAT_STARTTIME]))


def start_ticks(pid: int) -> int | None:
    stat = read_stat(pid)
    return None if stat is None else stat.start_ticks


def is_running(pid: int, expected_start_ticks: int) -> bool:
    """The process `pid` exists, is the one started at `expected_start_ticks`, and has not exited.

    A zombie ("Z": exited, not yet reaped by its parent) counts as exited: for a re-adopted worker
    the parent is init or a subreaper, which reaps it soon; the agent only needs to know it ended.
    """
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == expected_start_ticks and stat.state not in ("Z", "X")


class SignalResult(StrEnum):
    SENT = "SENT"
    GONE = "GONE"  # the recorded process no longer exists (or its pid now belongs to another)
    REFUSED = "REFUSED"  # the kernel refused (EPERM): not ours to signal


def signal_group(pid: int, expected_start_ticks: int, sig: signal.Signals) -> SignalResult:
    """Send `sig` to the process group led by `pid`, only if `pid` is still the recorded process.

    The check and the kill are two steps; the pid cannot be recycled in between for a child of
    the agent (an unreaped zombie keeps its pid), and for a re-adopted worker the window is a few
    microseconds against a pid space that wraps after millions of forks.
    """
    if not is_running(pid, expected_start_ticks):
        return SignalResult.GONE
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return SignalResult.GONE
    except PermissionError:
        return SignalResult.REFUSED
    return SignalResult.SENT


def catches(pid: int, sig: signal.Signals, proc: Path = Path("/proc")) -> bool:
    """Whether process `pid` handles or ignores `sig` (`SigCgt` / `SigIgn` of /proc/PID/status):
    a signal whose default action terminates must not be sent to a program that never asked."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return False
    bit = 1 << (int(sig) - 1)
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("SigCgt", "SigIgn") and int(value.strip() or "0", 16) & bit:
            return True
    return False


def argv_of(command: str | Sequence[str]) -> list[str]:
    """A BindCommand's `command`: a tuple is argv as is, a string runs through /bin/sh -c."""
    if isinstance(command, str):
        return [SHELL, "-c", command]
    return list(command)


def spawn(
    command: str | Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a worker in its own session (and process group), output appended to `log_path`.

    Raises OSError when the program cannot be started (not found, not executable).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv_of(command),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def describe(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def find_by_marker(marker_name: str, marker_value: str, proc: Path = Path("/proc")) -> int | None:
    """The pid of a process whose environment holds `marker_name=marker_value`, if any.

    Used once after a restart for a worker journaled as "starting" but without a pid (the agent
    died between fork and recording it): the marker the agent put in the worker's environment
    finds it, so it is adopted rather than left running unknown or started twice.
    """
    wanted = f"{marker_name}={marker_value}".encode()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            return int(entry.name)
    return None
