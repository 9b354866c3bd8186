"""The journal: atomic rewrite, reload after a crash, refusal of a foreign or corrupt file, pruning."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.services.node_agent.journal import CommandEntry, Journal, JournalError, WorkerEntry, write_atomic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _worker(command_id: object, **changes: object) -> WorkerEntry:
    fields: dict[str, object] = {
        "command_id": command_id, "task_id": "job-1", "worker_index": 0, "task_class": "SPOT",
        "gpu_indices": (0, 1), "gpu_fraction": 0.5, "log_path": "/tmp/x.log", "pid": 4242,
        "start_ticks": 123456, "started_at": T0,
    }  # fmt: skip
    return WorkerEntry.model_validate(fields | changes)


def test_a_saved_journal_reloads_equal(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    journal = Journal.open(path, node="n1")
    bind_id, evict_id = uuid4(), uuid4()
    worker = _worker(bind_id)
    journal.state.workers[worker.key] = worker
    journal.state.commands[str(bind_id)] = CommandEntry(
        command_id=bind_id, kind="bind", issued_at=T0, received_at=T0, state="done",
        trace_headers=[("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")],
    )  # fmt: skip
    ack = EvictAck(
        command_id=evict_id, node="n1", task_ids=("job-1",), outcome=EvictOutcome.KILLED, acked_at=T0
    )
    journal.state.commands[str(evict_id)] = CommandEntry(
        command_id=evict_id, kind="evict", issued_at=T0, received_at=T0, task_ids=("job-1",),
        grace_seconds=2.0, targets=[worker.key], sigterm_at=T0, ack=ack,
    )  # fmt: skip
    journal.save()
    again = Journal.open(path, node="n1")
    assert again.state == journal.state
    assert again.live_workers("job-1")[0].pid == 4242
    assert again.command(evict_id) is not None and again.command(evict_id).ack == ack  # type: ignore[union-attr]
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed, not left behind


def test_a_crash_mid_write_leaves_the_previous_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    journal = Journal.open(path, node="n1")
    journal.state.workers["a/0"] = _worker(uuid4())
    journal.save()
    before = path.read_bytes()
    # A writer killed before its rename leaves only a torn temp file next to the journal.
    (tmp_path / ".journal.json.tmp").write_bytes(b'{"version": 1, "node": "n1", "work')
    assert Journal.open(path, node="n1").state == journal.state
    assert path.read_bytes() == before
    # The next save simply replaces the stale temp file.
    journal.save()
    assert Journal.open(path, node="n1").state == journal.state


def test_write_atomic_replaces_whole_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "f.json"
    write_atomic(path, b"x" * 100_000)
    write_atomic(path, b"y")
    assert path.read_bytes() == b"y"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_a_corrupt_or_foreign_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    path.write_text("{not json")
    with pytest.raises(JournalError, match="cannot read"):
        Journal.open(path, node="n1")
    Journal(path, Journal.open(tmp_path / "none.json", node="n2").state).save()
    with pytest.raises(JournalError, match="belongs to node 'n2'"):
        Journal.open(path, node="n1")


def test_prune_forgets_old_answered_commands_only(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "j.json", node="n1")
    old_done, old_live, new_done = uuid4(), uuid4(), uuid4()
    for command_id, issued, live in (
        (old_done, T0, False),
        (old_live, T0, True),
        (new_done, T0 + timedelta(hours=1), False),
    ):
        journal.state.commands[str(command_id)] = CommandEntry(
            command_id=command_id, kind="bind", issued_at=issued, received_at=issued, state="done"
        )
        worker = _worker(
            command_id, exited_at=None if live else T0, exit_code=None if live else 0, exit_acked=not live
        )
        journal.state.workers[worker.key] = worker
    assert journal.prune(T0 + timedelta(minutes=30)) == 1
    assert journal.command(old_done) is None
    assert journal.command(old_live) is not None  # its worker still runs
    assert journal.command(new_done) is not None  # inside the window: a replay must still be recognised
