"""Reclaim warnings on the agent (issue 27 item 2): a signed WarnCommand makes a real worker
process receive SIGUSR1 (the fake task checkpoints at once and keeps working), once per command
id, only for the warned attempt, and never for a program that does not handle SIGUSR1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gfs.schemas.commands import WarnCommand
from gfs.schemas.workers import WorkerExited
from gfs.services.node_agent import procs
from gfs.services.platform.signing import sign
from tests.unit.node_agent.conftest import KEY, NODE, AgentHarness, bind


def warn(task_id: str, attempt: int = 1, **changes: Any) -> WarnCommand:
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(), "node": NODE, "task_id": task_id, "warned_attempt": attempt,
        "lead_seconds": 600.0, "issued_at": datetime.now(UTC),
    }  # fmt: skip
    return sign(WarnCommand(**(fields | changes)), key=KEY)


def _log(harness: AgentHarness, task_id: str) -> str:
    worker = next(w for w in harness.agent.journal.state.workers.values() if w.task_id == task_id)
    return Path(worker.log_path).read_text()


async def test_a_warning_makes_the_worker_checkpoint_and_go_on(harness: AgentHarness, tmp_path: Path) -> None:
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    await harness.send(bind("job-w", "--checkpoint-dir", str(checkpoints), attempt=1))
    await harness.until(lambda: "started" in _log(harness, "job-w"))
    command = warn("job-w")
    await harness.send(command)
    await harness.until(lambda: "checkpoint on warning" in _log(harness, "job-w"))
    assert json.loads((checkpoints / "checkpoint.json").read_text())["steps"] >= 0
    (worker,) = harness.agent.journal.live_workers("job-w")
    assert worker.warnings == 1 and worker.warned_at is not None
    entry = harness.agent.journal.command(command.command_id)
    assert entry is not None and (entry.kind, entry.targets, entry.state) == ("warn", [worker.key], "done")
    await harness.send(command)  # redelivered: recognised by its id, not signalled again
    await asyncio.sleep(0.3)
    assert _log(harness, "job-w").count("checkpoint on warning") == 1 and worker.warnings == 1
    assert not harness.sink.payloads(WorkerExited)  # still working: a warning stops nothing
    assert worker.pid is not None and procs.is_running(worker.pid, worker.start_ticks or 0)


async def test_another_attempts_warning_signals_nothing(harness: AgentHarness) -> None:
    await harness.send(bind("job-x", attempt=2))
    await harness.until(lambda: "started" in _log(harness, "job-x"))
    await harness.send(warn("job-x", attempt=1))
    await asyncio.sleep(0.3)
    assert "checkpoint on warning" not in _log(harness, "job-x")
    assert harness.agent.journal.live_workers("job-x")[0].warnings == 0


async def test_a_program_without_a_sigusr1_handler_is_not_signalled(harness: AgentHarness) -> None:
    # SIGUSR1's default action would terminate `sleep`: the agent leaves it alone and says why.
    await harness.send(bind("job-s", command=("sleep", "30"), attempt=1))
    (worker,) = harness.agent.journal.live_workers("job-s")
    assert worker.pid is not None
    command = warn("job-s")
    await harness.send(command)
    await asyncio.sleep(0.3)
    assert procs.is_running(worker.pid, worker.start_ticks or 0) and worker.warnings == 0
    entry = harness.agent.journal.command(command.command_id)
    assert entry is not None and entry.targets == [] and "does not handle SIGUSR1" in entry.failures[0]


def test_catches_reads_the_handled_and_ignored_masks(tmp_path: Path) -> None:
    # SIGUSR1 is signal 10: bit 9 (0x200) of SigCgt / SigIgn.
    status = tmp_path / "41" / "status"
    status.parent.mkdir()
    status.write_text("Name:\tx\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000200\n")
    assert procs.catches(41, signal.SIGUSR1, proc=tmp_path)
    status.write_text("Name:\tx\nSigIgn:\t0000000000000200\nSigCgt:\t0000000000004000\n")
    assert procs.catches(41, signal.SIGUSR1, proc=tmp_path)
    status.write_text("Name:\tx\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000004002\n")
    assert not procs.catches(41, signal.SIGUSR1, proc=tmp_path)
    assert procs.catches(os.getpid(), signal.SIGINT)  # Python's own KeyboardInterrupt handler
