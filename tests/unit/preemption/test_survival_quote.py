"""The survival quote on a spot task's TaskAccepted (issue 27 item 1), worked by hand.

The pool: two 2-GPU nodes (4 GPUs). Spot task A (2 GPUs) runs; spot task B (1 GPU, 2 h guarantee)
is submitted. Every running spot GPU is kept over B, so HP may grow to K = 4 - 2 - 1 = 1 GPU
before B is evicted. The quota carries the HP-demand forecast, hours 1..4 ahead:
mean 0.5, 1, 1, 2 and std 1, 1, 0.5, 1, so z = (1 - mean) / std = 0.5, 0, 0, -1 and the hours
survive with Phi(0.5) = 0.6915, 0.5, 0.5, Phi(-1) = 0.1587 (standard normal table). A duration
takes the worst hour within it: 1 h 0.691, 2 h 0.5, 4 h 0.159.

These are the model's raw numbers: the tests below run with the identity map (fixture `raw`), so
that they check the model's plumbing; the live map (survival.DEFAULT_RECALIBRATION) moves every
quote into 0.9-1.0, where these cases would be hard to tell apart. The last test checks that the
controller quotes through that map.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gfs.schemas.commands import BindCommand
from gfs.schemas.quota import GuaranteeQuota, HpDemandHour, SpotQuota
from gfs.schemas.tasks import SurvivalQuote, TaskAccepted, TaskClass, TaskSubmitted
from gfs.schemas.workers import WorkerStarted
from gfs.services.core.survival import DEFAULT_RECALIBRATION, QuoteCalibration
from gfs.services.preemption.controller import survival_quote
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import Effects
from gfs.services.preemption.journal.inputs import apply, entry_for

T0 = 1_800_000_000.0
FORECAST = ((0.5, 1.0), (1.0, 1.0), (1.0, 0.5), (2.0, 1.0))


def _at(s: float) -> datetime:
    return datetime.fromtimestamp(T0 + s, UTC)


def _quota(hp_demand: tuple[tuple[float, float], ...] | None, gpus: float = 4.0) -> SpotQuota:
    return SpotQuota(
        pool="A100",
        quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=gpus) for h in (1, 2, 4)),
        eta=1.0,
        capacity_gpus=4,
        valid_from=_at(0),
        valid_until=_at(3 * 3600.0),
        forecast_version="m:1",
        hp_demand=None if hp_demand is None else tuple(HpDemandHour(mean=m, std=s) for m, s in hp_demand),
    )


def _task(tid: str, cls: TaskClass, gpus: float, hours: int = 1) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=tid,
        tenant="org-a",
        gpu_model="A100",
        gpus_per_worker=gpus,
        workers=1,
        task_class=cls,
        guarantee_hours=hours,
        command=("gfs", "fake-task"),
    )  # type: ignore[arg-type]


def _event(c: PoolController, payload: object, t: float) -> Effects:
    entry = entry_for(payload, T0 + t)  # type: ignore[arg-type]
    assert entry is not None
    out = apply(c, entry)
    out.extend(apply(c, ("schedule", {}, T0 + t)))
    return out


def _world(
    hp_demand: tuple[tuple[float, float], ...] | None = FORECAST, quota: float = 4.0
) -> PoolController:
    c = PoolController("A100", ControllerSettings(grace_s=30.0, ack_margin_s=10.0))
    for node in ("n0", "n1"):
        apply(c, ("node_seen", {"node": node, "gpus": 2}, T0))
    _event(c, _quota(hp_demand, 4.0), 0)
    out = _event(c, _task("A", TaskClass.SPOT, 2), 0)
    bind = next(cmd for cmd in out.commands if isinstance(cmd, BindCommand))
    ack = WorkerStarted(
        command_id=bind.command_id, node=bind.node, task_id="A", worker_index=0, pid=100, started_at=_at(1)
    )
    _event(c, ack, 1)
    if quota != 4.0:
        _event(c, _quota(hp_demand, quota), 2)
    return c


def _accepted(out: Effects) -> TaskAccepted:
    accepted = [e for e in out.events if isinstance(e, TaskAccepted)]
    assert len(accepted) == 1
    return accepted[0]


@pytest.fixture
def raw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survival_quote, "DEFAULT_RECALIBRATION", QuoteCalibration())


@pytest.mark.usefixtures("raw")
def test_a_spot_task_is_quoted_from_the_forecast_and_the_pool() -> None:
    c = _world()
    accepted = _accepted(_event(c, _task("B", TaskClass.SPOT, 1, hours=2), 1000))
    assert accepted.survival == SurvivalQuote(
        guarantee_hours=2, guarantee=0.5, hours_1=0.691, hours_2=0.5, hours_4=0.159
    )


@pytest.mark.usefixtures("raw")
def test_hours_of_the_forecast_already_over_are_dropped() -> None:
    # 3700 s after the quota: the forecast's hour 1 is over, so B's first hour is the forecast's
    # hour 2 (z = 0), then hour 3 (z = 0), hour 4 (z = -1), and beyond it hour 4 again.
    c = _world()
    accepted = _accepted(_event(c, _task("B", TaskClass.SPOT, 1, hours=1), 3700))
    assert accepted.survival == SurvivalQuote(
        guarantee_hours=1, guarantee=0.5, hours_1=0.5, hours_2=0.5, hours_4=0.159
    )


def test_hp_tasks_and_pools_without_a_forecast_get_no_quote() -> None:
    c = _world()
    assert _accepted(_event(c, _task("H", TaskClass.HP, 1), 1000)).survival is None
    bare = _world(hp_demand=None)
    assert _accepted(_event(bare, _task("B", TaskClass.SPOT, 1), 1000)).survival is None


@pytest.mark.usefixtures("raw")
def test_a_task_the_quota_does_not_admit_now_is_quoted_the_quotas_promise() -> None:
    # Quota 2 GPUs with A's 2 running: B (1 GPU) waits until the quota admits it, and then its
    # slack covers the 0.9-quantile of HP demand over its guarantee: quoted p = 0.9 throughout.
    c = _world(quota=2.0)
    accepted = _accepted(_event(c, _task("B", TaskClass.SPOT, 1, hours=2), 1000))
    assert accepted.survival == SurvivalQuote(
        guarantee_hours=2, guarantee=0.9, hours_1=0.9, hours_2=0.9, hours_4=0.9
    )


def test_the_live_quote_goes_through_the_fitted_map() -> None:
    # The waiting task of the test above (raw 0.9 for every duration), through the live map of
    # each duration, rounded to 3 decimals; the identity would leave 0.9.
    c = _world(quota=2.0)
    accepted = _accepted(_event(c, _task("B", TaskClass.SPOT, 1, hours=2), 1000))
    mapped = {h: round(DEFAULT_RECALIBRATION(h, 0.9), 3) for h in (1, 2, 4)}
    assert accepted.survival == SurvivalQuote(
        guarantee_hours=2, guarantee=mapped[2], hours_1=mapped[1], hours_2=mapped[2], hours_4=mapped[4]
    )
    assert all(v > 0.9 for v in mapped.values())
