"""Early reclaim warnings in the live controller (issue 27 item 2), worked by hand.

The pool: two 2-GPU nodes (4 GPUs). Spot task A (2 GPUs) starts at t=1, spot task B (1 GPU) at
t=2: 3 spot GPUs in use, so HP may grow to 4 - 3 = 1 GPU before spot is reclaimed. The quota
(valid from t=0) carries the HP-demand forecast per hour; the warning guards the 0.95 quantile,
mean + 1.6449 std (standard normal table), over the hours [now, now + 600 s] touches.

At a tick at t=100 the lost GPU time of A is 2 x 99 = 198, of B 1 x 98 = 98: B is the likelier
victim, then A.
- forecast hour 1 mean 1.0, std 0.5: quantile 1.822, shortfall 0.822 <= B's 1 GPU: B warned alone;
- mean 1.0, std 1.0: quantile 2.645, shortfall 1.645 > 1: B and then A (3 GPUs) are warned;
- mean 0.5, std 0.25: quantile 0.911 < 1: no shortfall, no warning (the mean alone, 1.0 in the
  first case, would warn nobody either: the quantile is what warns).
"""

from __future__ import annotations

from datetime import UTC, datetime

from gfs.schemas.commands import BindCommand, WarnCommand
from gfs.schemas.quota import GuaranteeQuota, HpDemandHour, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskReclaimWarning, TaskSubmitted
from gfs.schemas.workers import WorkerStarted
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.reclaim_warnings import hp_quantile
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import Effects
from gfs.services.preemption.journal.inputs import apply, entry_for

T0 = 1_800_000_000.0


def _at(s: float) -> datetime:
    return datetime.fromtimestamp(T0 + s, UTC)


def _quota(hp_demand: tuple[tuple[float, float], ...] | None) -> SpotQuota:
    return SpotQuota(
        pool="A100",
        quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=4.0) for h in (1, 2, 4)),
        eta=1.0,
        capacity_gpus=4,
        valid_from=_at(0),
        valid_until=_at(3 * 3600.0),
        forecast_version="m:1",
        hp_demand=None if hp_demand is None else tuple(HpDemandHour(mean=m, std=s) for m, s in hp_demand),
    )


def _task(tid: str, cls: TaskClass, gpus: float) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=tid, tenant="org-a", gpu_model="A100", gpus_per_worker=gpus, workers=1,
        task_class=cls, command=("gfs", "fake-task"),
    )  # fmt: skip


def _event(c: PoolController, payload: object, t: float, *, schedule: bool = True) -> Effects:
    entry = entry_for(payload, T0 + t)  # type: ignore[arg-type]
    assert entry is not None
    out = apply(c, entry)
    if schedule:
        out.extend(apply(c, ("schedule", {}, T0 + t)))
    return out


def _start(c: PoolController, tid: str, gpus: float, t: float) -> BindCommand:
    out = _event(c, _task(tid, TaskClass.SPOT, gpus), t)
    bind = next(cmd for cmd in out.commands if isinstance(cmd, BindCommand))
    ack = WorkerStarted(
        command_id=bind.command_id, node=bind.node, task_id=tid, worker_index=0, pid=100, started_at=_at(t)
    )
    _event(c, ack, t)
    return bind


def _world(hp_demand: tuple[tuple[float, float], ...] | None) -> tuple[PoolController, dict[str, str]]:
    c = PoolController("A100", ControllerSettings(grace_s=30.0, ack_margin_s=10.0))
    for node in ("n0", "n1"):
        apply(c, ("node_seen", {"node": node, "gpus": 2}, T0))
    _event(c, _quota(hp_demand), 0)
    nodes = {"A": _start(c, "A", 2, 1).node, "B": _start(c, "B", 1, 2).node}
    return c, nodes


def _tick(c: PoolController, t: float) -> Effects:
    return apply(c, ("tick", {}, T0 + t))


def _warned(out: Effects) -> list[str]:
    return [e.task_id for e in out.events if isinstance(e, TaskReclaimWarning)]


def test_the_likeliest_victim_is_warned_when_the_quantile_exceeds_what_spot_leaves() -> None:
    c, nodes = _world(((1.0, 0.5), (1.0, 0.5)))
    out = _tick(c, 100)
    assert _warned(out) == ["B"]
    (event,) = [e for e in out.events if isinstance(e, TaskReclaimWarning)]
    assert (event.pool, event.attempt, event.lead_s, event.issued_at) == ("A100", 1, 600.0, _at(100))
    assert abs(event.shortfall_gpus - 0.8224) < 1e-3
    (command,) = [cmd for cmd in out.commands if isinstance(cmd, WarnCommand)]
    assert (command.node, command.task_id, command.warned_attempt, command.lead_seconds) == (
        nodes["B"], "B", 1, 600.0,
    )  # fmt: skip
    (decision,) = [d for d in out.decisions if d.kind == "warned"]
    assert (decision.task_id, decision.detail["hp_demand"], decision.detail["nodes"]) == (
        "B", "forecast", [nodes["B"]],
    )  # fmt: skip


def test_a_larger_shortfall_warns_the_next_victim_too() -> None:
    c, _ = _world(((1.0, 1.0),))
    assert _warned(_tick(c, 100)) == ["B", "A"]


def test_no_warning_while_the_quantile_fits_in_what_spot_leaves() -> None:
    c, _ = _world(((0.5, 0.25), (0.5, 0.25)))
    out = _tick(c, 100)
    assert _warned(out) == [] and not out.commands


def test_a_run_is_warned_once_per_lead_time() -> None:
    c, _ = _world(((1.0, 0.5), (1.0, 0.5)))
    assert _warned(_tick(c, 100)) == ["B"]
    assert _warned(_tick(c, 699)) == []  # 599 s later: within the lead time
    assert _warned(_tick(c, 700)) == ["B"]  # 600 s later: warned again
    assert c.warnings.sent == 2


def test_the_lead_time_reaches_into_the_next_forecast_hour() -> None:
    # Hour 1 is quiet (quantile 0), hour 2 needs 2 GPUs: at t=2900 the lead ends at 3500, inside
    # hour 1, so no warning; at t=3100 it ends at 3700, inside hour 2: shortfall 2 - 1 = 1, B.
    c, _ = _world(((0.0, 0.0), (2.0, 0.0)))
    assert _warned(_tick(c, 2900)) == []
    assert _warned(_tick(c, 3100)) == ["B"]


def test_without_a_forecast_the_hp_running_and_queued_now_is_the_demand() -> None:
    c, _ = _world(None)
    assert _warned(_tick(c, 100)) == []
    _event(c, _task("H", TaskClass.HP, 2), 200, schedule=False)  # queued, no pass yet
    out = _tick(c, 200)
    assert _warned(out) == ["B"]  # shortfall 2 - 1 = 1 GPU: B's covers it
    assert [d.detail["hp_demand"] for d in out.decisions if d.kind == "warned"] == ["observed"]


def test_hours_of_the_forecast_already_over_are_dropped() -> None:
    quota = _quota(((9.0, 0.0), (1.0, 0.0)))
    quantile, offset = hp_quantile(quota, T0 + 3700.0, 0.95)
    assert quantile == [1.0] and offset == 100.0
    assert hp_quantile(quota, T0 + 7300.0, 0.95) == (None, T0 + 7300.0)


def test_no_warning_while_the_kill_switch_is_on() -> None:
    from gfs.services.preemption.controller.settings import Controls

    c, _ = _world(((1.0, 1.0),))
    c.control(Controls(kill_switch=True), T0 + 50)
    assert _warned(_tick(c, 100)) == []
    c.control(Controls(), T0 + 150)
    assert _warned(_tick(c, 200)) == ["B", "A"]


def test_the_accepted_decision_carries_the_survival_quote() -> None:
    # The dashboard reads the quote from it (item 5); the forecast here: one hour, mean 0, std 0.
    c, _ = _world(((0.0, 0.0),))
    out = _event(c, _task("C", TaskClass.SPOT, 1), 10)
    (accepted,) = [d for d in out.decisions if d.kind == "accepted"]
    assert accepted.detail["survival"] is not None and accepted.detail["survival"]["guarantee_hours"] == 1
    out = _event(c, _task("H2", TaskClass.HP, 1), 10)
    assert [d.detail["survival"] for d in out.decisions if d.kind == "accepted"] == [None]
