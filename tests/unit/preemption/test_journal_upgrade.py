"""Issue 22 made the wire rules stricter (tenants' shape, GPU bounds). A journal written before
must still replay, or its partition could never be claimed again: a hostile-input fix that stops a
partition. A journaled submission and cancel that today's rules refuse are replayed as recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gfs.schemas.tasks import TaskSubmitted, TaskWithdrawn
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.journal.inputs import apply, entry_for

# What the journal of an older version holds: a tenant with a space and a 1/1000 GPU worker.
LEGACY_TASK = {
    "task_id": "old-1", "tenant": "org a", "gpu_model": "A100", "gpus_per_worker": 0.001, "workers": 1,
    "task_class": "SPOT", "guarantee_hours": 1, "expected_duration_s": None, "checkpoint_interval_s": None,
    "command": ["gfs", "fake-task"],
}  # fmt: skip


def test_a_journal_entry_that_predates_the_stricter_rules_still_replays() -> None:
    with pytest.raises(ValidationError):
        TaskSubmitted.model_validate(LEGACY_TASK)  # today's rules refuse it at the edge
    controller = PoolController("A100", ControllerSettings())
    gpus = tuple(
        GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=1) for i in range(2)
    )
    node = NodeTelemetry(node="n0", gpu_model="A100", sampled_at=datetime(2026, 1, 1, tzinfo=UTC), gpus=gpus)
    seen = entry_for(node, 0.0)
    assert seen is not None
    apply(controller, seen)
    apply(controller, ("submit", {"task": LEGACY_TASK, "duplicate": False}, 1.0))
    assert "old-1" in controller.seen
    out = apply(controller, ("cancel", {"task_id": "old-1", "tenant": "org a", "reason": ""}, 2.0))
    assert [type(e) for e in out.events] == [TaskWithdrawn]  # the owner's cancel, matched by tenant
