"""Command ids (issue 22, item 9): derived from the pool, the owner's epoch (the id salt) and a
counter, so a replay of the journal re-derives the ids of journaled commands (re-emission stays
idempotent) while a command decided again after a lost commit never reuses a published id."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from gfs.schemas.commands import BindCommand
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.services.preemption.controller.ids import ID_NAMESPACE, command_id, id_salt
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.journal.inputs import Entry, apply, entry_for

T0 = 1_800_000_000.0


def test_the_derivation_by_hand() -> None:
    # No salt (journal rows from before the salt): the old derivation, "<pool>/<counter>".
    assert command_id("A100", "", 3) == uuid.uuid5(ID_NAMESPACE, "A100/3")
    # With an epoch: "<pool>/e<epoch>/<counter>".
    assert command_id("A100", id_salt(7), 3) == uuid.uuid5(ID_NAMESPACE, "A100/e7/3")
    assert id_salt(None) == "" and id_salt(1) == "e1"
    assert command_id("A100", "e1", 3) != command_id("A100", "e2", 3)
    assert command_id("A100", "e1", 3) != command_id("A10", "e1", 3)


def _quota() -> SpotQuota:
    return SpotQuota(
        pool="A100", quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=4.0) for h in (1, 2, 4)),
        eta=1.0, capacity_gpus=4, valid_from=datetime.fromtimestamp(T0, UTC),
        valid_until=datetime.fromtimestamp(T0 + 3600, UTC), forecast_version="m:1",
    )  # fmt: skip


def _submit(tid: str, t: float) -> Entry:
    task = TaskSubmitted(task_id=tid, tenant="org-a", gpu_model="A100", gpus_per_worker=2, workers=1,
                         task_class=TaskClass.SPOT, command=("gfs", "fake-task"))  # fmt: skip
    entry = entry_for(task, T0 + t)
    assert entry is not None
    return entry


def _binds(controller: PoolController, entry: Entry) -> list[BindCommand]:
    out = apply(controller, entry)
    out.extend(apply(controller, ("schedule", {}, entry.at)))
    return [c for c in out.commands if isinstance(c, BindCommand)]


def _controller(salt: str) -> PoolController:
    c = PoolController("A100", ControllerSettings(grace_s=30.0, ack_margin_s=10.0))
    c.id_salt = salt
    for entry in (("node_seen", {"node": "n0", "gpus": 2}, T0), ("node_seen", {"node": "n1", "gpus": 2}, T0)):
        apply(c, entry)
    quota = entry_for(_quota(), T0)
    assert quota is not None
    apply(c, quota)
    return c


def test_a_command_decided_again_after_a_lost_commit_gets_a_new_id() -> None:
    # Epoch 1 decides task A's bind; the commit of that batch is lost after its rows went out.
    live = _controller(id_salt(1))
    (published,) = _binds(live, _submit("A", 1))
    # The next owner (epoch 2) rebuilds from a journal without that batch and decides another
    # task first: same pool, same counter value, but not the same id.
    rebuilt = _controller(id_salt(2))
    (other,) = _binds(rebuilt, _submit("B", 2))
    assert rebuilt.counter == live.counter  # the counter repeats ...
    assert other.command_id != published.command_id  # ... the id does not
    # Without the salt (today's derivation) they collide: the defect this prevents.
    assert command_id("A100", "", live.counter) == command_id("A100", "", rebuilt.counter)


def test_a_replay_rederives_the_ids_of_journaled_commands() -> None:
    live = _controller(id_salt(1))
    (first,) = _binds(live, _submit("A", 1))
    live.id_salt = id_salt(2)  # a failover: the next owner decides B under epoch 2
    (second,) = _binds(live, _submit("B", 2))
    # The replay applies each row with the salt of the epoch it was written under.
    again = _controller(id_salt(1))
    (first_again,) = _binds(again, _submit("A", 1))
    again.id_salt = id_salt(2)
    (second_again,) = _binds(again, _submit("B", 2))
    assert (first_again.command_id, second_again.command_id) == (first.command_id, second.command_id)
    assert first.command_id != second.command_id
