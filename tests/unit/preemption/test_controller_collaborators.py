"""The pool controller's collaborators tested alone (services/preemption/controller): each is built
with only what it is given, over the core's real (pure) driver, never through `PoolController`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gfs.schemas.commands import EvictCommand
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed, TaskClass, TaskSubmitted
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.guarantee import GUARANTEE_PERIOD_S
from gfs.services.core.ids import PoolId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings
from gfs.services.preemption.controller.binds import Binder
from gfs.services.preemption.controller.endings import Endings
from gfs.services.preemption.controller.ids import CommandIds, command_id
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.periods import closes, ran_out
from gfs.services.preemption.controller.quota import PoolQuota
from gfs.services.preemption.controller.reconcile import Reconciler
from gfs.services.preemption.controller.reconcile_rules import report_of
from gfs.services.preemption.controller.settings import ControllerSettings, Controls
from gfs.services.preemption.controller.types import _Eviction, _Task

T0 = 1_800_000_000.0
SETTINGS = ControllerSettings(grace_s=30.0, ack_margin_s=10.0, unknown_after_s=60.0)


def _driver(*nodes: str) -> PoolDriver[uuid.UUID]:
    driver: PoolDriver[uuid.UUID] = PoolDriver(
        PoolRuntime(PoolState(PoolId("A100"), (), ()), build_policy("gfs"), RuntimeSettings())
    )
    for node in nodes:
        driver.node_seen(node, 2, T0)
    return driver


def _spot(tid: str = "S") -> _Task:
    return _Task(
        TaskSubmitted(task_id=tid, tenant="org-a", gpu_model="A100", gpus_per_worker=1, workers=1,
                      task_class=TaskClass.SPOT, guarantee_hours=1, command=("gfs", "fake-task"))
    )  # fmt: skip


def _quota(gpus: dict[int, float], until: float = 3600.0) -> SpotQuota:
    return SpotQuota(
        pool="A100",
        quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=q) for h, q in gpus.items()),  # type: ignore[arg-type]
        eta=1.0,
        capacity_gpus=4,
        valid_from=datetime.fromtimestamp(T0, UTC),
        valid_until=datetime.fromtimestamp(T0 + until, UTC),
        forecast_version="m:1",
    )


# ----- ids ----------------------------------------------------------------------------------------
def test_ids_count_up_under_the_salt_in_force() -> None:
    ids = CommandIds("A100")
    first = ids.next()
    ids.salt = "e4"
    second = ids.next()
    assert (first, second) == (command_id("A100", "", 1), command_id("A100", "e4", 2))
    assert ids.counter == 2


# ----- periods ------------------------------------------------------------------------------------
def test_periods_are_reported_once_each_and_a_failed_one_is_not_counted() -> None:
    task = _spot()
    timer = ran_out("A100", "S", task, T0, T0 + GUARANTEE_PERIOD_S)  # the first ran out on its timer
    assert task.periods_closed == 1 and timer.outcome is GuaranteeOutcome.SUCCEEDED
    # Stopped 2.5 periods in, the second period logged a success: it and a FAILED third.
    now = T0 + 2.5 * GUARANTEE_PERIOD_S
    events = closes("A100", "S", task, T0, now, 1, failed=True)
    assert all(isinstance(e, GuaranteePeriodClosed) for e in events)
    spans = [(e.period_start.timestamp() - T0, e.period_end.timestamp() - T0, e.outcome) for e in events]  # type: ignore[attr-defined]
    p = GUARANTEE_PERIOD_S
    assert spans == [(p, 2 * p, GuaranteeOutcome.SUCCEEDED), (2 * p, 2.5 * p, GuaranteeOutcome.FAILED)]
    assert task.periods_closed == 2


# ----- quota --------------------------------------------------------------------------------------
def test_no_spot_quota_before_the_first_one_and_a_duration_not_offered_takes_the_next_longer() -> None:
    driver = _driver("n0")
    quota = PoolQuota(driver)
    assert set(driver.runtime.quota.values()) == {0.0} and quota.version == "" and quota.last is None
    out = quota.receive(_quota({1: 4.0, 2: 3.0, 4: 1.0}), T0, mode=None)
    assert [d.kind for d in out.decisions] == ["quota"]
    assert quota.version.startswith("m:1@") and driver.quota_valid_until == T0 + 3600.0
    longer = {h: (4.0 if h <= 1 else 3.0 if h <= 2 else 1.0) for h in driver.runtime.quota}
    assert driver.runtime.quota == longer


def test_a_held_quota_records_what_arrives_and_does_not_expire_until_released() -> None:
    driver = _driver("n0")
    quota = PoolQuota(driver)
    quota.receive(_quota({1: 4.0, 2: 4.0, 4: 4.0}, until=60.0), T0, mode=None)
    frozen = Controls(quota_mode="freeze")
    assert not quota.controls_changed(Controls(), frozen, T0 + 1)  # the quota in force stays
    out = quota.receive(_quota({1: 1.0, 2: 1.0, 4: 1.0}), T0 + 2, mode="freeze")
    assert [d.kind for d in out.decisions] == ["quota_held"] and set(driver.runtime.quota.values()) == {4.0}
    assert not quota.expire(T0 + 120, mode="freeze")  # held: no expiry
    back = quota.controls_changed(frozen, Controls(), T0 + 130)  # the last one received applies
    assert [d.kind for d in back.decisions] == ["quota"] and set(driver.runtime.quota.values()) == {1.0}
    override = Controls(quota_mode="override", quota_gpus=((1, 2.0),))
    assert not quota.controls_changed(Controls(), override, T0 + 140)
    assert set(driver.runtime.quota.values()) == {2.0}


def test_an_expired_quota_is_reported_once() -> None:
    driver = _driver("n0")
    quota = PoolQuota(driver)
    quota.receive(_quota({1: 4.0, 2: 4.0, 4: 4.0}, until=60.0), T0, mode=None)
    assert not quota.expire(T0 + 30, mode=None)
    assert [d.kind for d in quota.expire(T0 + 61, mode=None).decisions] == ["quota_expired"]
    assert not quota.expire(T0 + 62, mode=None)


# ----- reconciler ---------------------------------------------------------------------------------
def _reconciler(*nodes: str) -> tuple[Reconciler, CommandLedger, CommandIds]:
    driver = _driver(*nodes)
    tasks: dict[str, _Task] = {}
    ids, ledger, quota = CommandIds("A100"), CommandLedger("A100"), PoolQuota(driver)
    binder = Binder(SETTINGS, driver, tasks, ids, ledger, quota)
    endings = Endings("A100", SETTINGS, driver, tasks, ids, ledger, binder, quota)
    return Reconciler(SETTINGS, driver, tasks, ids, ledger, endings), ledger, ids


def test_reports_of_unknown_nodes_and_late_reports_are_ignored() -> None:
    reconciler, _, _ = _reconciler("n0")
    reconciler.node_report("n9", report_of(T0, [("X", 1, 0)]))
    assert reconciler.reports == {}
    reconciler.node_report("n0", report_of(T0 + 10, [("X", 1, 0)]))
    reconciler.node_report("n0", report_of(T0 + 5, []))  # older: read late
    assert reconciler.reports["n0"].lists("X", 1)
    reconciler.forget("n0")
    assert reconciler.reports == {} and not reconciler.unknown.since


def test_work_nobody_holds_is_stopped_once_reported_long_enough_unless_the_kill_switch_is_on() -> None:
    reconciler, ledger, ids = _reconciler("n0")
    reconciler.node_report("n0", report_of(T0, [("ghost", 3, 0)]))
    assert not reconciler.reconcile(T0, kill_switch=False)
    reconciler.node_report("n0", report_of(T0 + 61, [("ghost", 3, 0)]))
    assert not reconciler.reconcile(T0 + 61, kill_switch=True)
    out = reconciler.reconcile(T0 + 61, kill_switch=False)
    (command,) = out.commands
    assert isinstance(command, EvictCommand) and command.task_ids == ("ghost",) and command.attempt == 3
    assert command.command_id == command_id("A100", "", ids.counter)
    assert [d.kind for d in out.decisions] == ["unknown_stopped"]
    assert ledger.unanswered(command.command_id) is None  # issued reported: nobody waits for it
    assert not reconciler.reconcile(T0 + 62, kill_switch=False)  # not again within the window


@pytest.mark.parametrize(("listed", "runs"), [(True, True), (False, False)], ids=["listed", "gone"])
def test_an_unanswered_eviction_runs_while_its_node_still_lists_the_attempt(listed: bool, runs: bool) -> None:
    reconciler, ledger, _ = _reconciler("n0")
    evict = uuid.UUID(int=5)
    ledger.eviction_issued(evict, _Eviction("n0", ("B",), 2))
    reconciler.node_report("n0", report_of(T0, [("B", 2, 0)] if listed else []))
    assert reconciler.eviction_runs(evict) is runs
    ledger.report(evict)  # answered: never waited for again
    assert reconciler.eviction_runs(evict) is False
