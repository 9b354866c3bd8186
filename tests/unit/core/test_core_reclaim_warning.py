"""Early reclaim warnings (issue 27 item 2, services/core/reclaim_warning.py), worked by hand."""

from __future__ import annotations

import math

import pytest
from builders import a_pool, a_spot, a_task

from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.reclaim_warning import (
    WarningSettings,
    lead_rows,
    lost_after_warning,
    shortfall_gpus,
    warn_candidates,
)
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Stopped
from gfs.services.simulator.reclaim_warnings import WarningLedger


def test_lead_rows_count_the_hours_the_lead_time_touches() -> None:
    # [3000, 3600] ends exactly on the hour: only hour 0's row.
    assert lead_rows(3000.0, 600.0, 4) == 1
    # [3100, 3700] reaches into hour 1: rows 0 and 1.
    assert lead_rows(3100.0, 600.0, 4) == 2
    # A 3-hour lead from 3100 s touches hours 0..3, four rows; the horizon bounds it.
    assert lead_rows(3100.0, 3 * 3600.0, 4) == 4
    assert lead_rows(3100.0, 3 * 3600.0, 3) == 3


def test_shortfall_is_forecast_demand_beyond_what_spot_leaves_free() -> None:
    # 64 GPUs, spot holds 24: HP has 40 without evicting. Forecast rows (hour 0, hour 1) = 36, 50.
    # At 3100 s a 600 s lead reaches hour 1: demand max(30 now, 36, 50) = 50 -> 10 GPUs short.
    assert shortfall_gpus(64, 24, 30, [36.0, 50.0], 3100.0, 600.0) == 10.0
    # At 1000 s the lead stays in hour 0: demand max(30, 36) = 36 <= 40 -> none.
    assert shortfall_gpus(64, 24, 30, [36.0, 50.0], 1000.0, 600.0) == 0.0
    # No forecast: what runs and queues now, 45 -> 5 short.
    assert shortfall_gpus(64, 24, 45, None, 1000.0, 600.0) == 5.0
    # HP already queued above the forecast counts: 44 now against a forecast of 36 -> 4 short.
    assert shortfall_gpus(64, 24, 44, [36.0, 50.0], 1000.0, 600.0) == 4.0


def _world() -> PoolRuntime:
    """Two 2-GPU nodes: spot A (2 GPUs) starts at 0, spot B (2 GPUs) at 1000 (as in
    test_core_runtime's preempted world, where HP H at 2000 evicts B, the cheaper victim)."""
    rt = PoolRuntime(
        a_pool(2, 2), build_policy("gfs"), RuntimeSettings(t_win_s=31 * 86400.0, cost_weight=5.0)
    )
    assert rt.submit(a_spot("A", gpus=2, submit=0.0), 0.0) is None
    rt.schedule(0.0)
    assert rt.submit(a_spot("B", gpus=2, submit=1000.0), 1000.0) is None
    rt.schedule(1000.0)
    return rt


def test_candidates_are_the_victims_the_cost_reaches_first() -> None:
    rt = _world()
    # At 1900 s: A has lost 2 x 1900 = 3800 GPU-s, B 2 x 900 = 1800: B first.
    assert warn_candidates(rt.state, 2.0, 1900.0) == ["B"]
    assert warn_candidates(rt.state, 3.0, 1900.0) == ["B", "A"]  # B's 2 GPUs do not cover 3
    assert warn_candidates(rt.state, 2.0, 1900.0, margin=2.0) == ["B", "A"]
    assert warn_candidates(rt.state, 0.0, 1900.0) == []
    # And B is who HP evicts at 2000.
    assert rt.submit(a_task("H", gpus=2, submit=2000.0), 2000.0) is None
    stops = [o.task_id for o in rt.schedule(2000.0).outcomes if isinstance(o, Stopped)]
    assert stops == ["B"]


def test_candidates_skip_hp_tasks() -> None:
    pool = a_pool(2, 2)
    rt = PoolRuntime(pool, build_policy("gfs"), RuntimeSettings(t_win_s=31 * 86400.0, cost_weight=5.0))
    assert rt.submit(a_task("H", gpus=2, submit=0.0), 0.0) is None
    rt.schedule(0.0)
    assert warn_candidates(rt.state, 4.0, 100.0) == []


def test_lost_work_after_a_warning() -> None:
    # 5400 s into a run with hourly checkpoints: 1800 s since the checkpoint at 3600.
    assert lost_after_warning(5400.0, 3600.0, None) == 1800.0
    # Warned (and checkpointed) at 5000 s: 400 s lost.
    assert lost_after_warning(5400.0, 3600.0, 5000.0) == 400.0
    # Warned at 3000 s, before the periodic checkpoint at 3600: the periodic one is newer.
    assert lost_after_warning(5400.0, 3600.0, 3000.0) == 1800.0
    # No periodic checkpoints: everything since the start, or since the warning.
    assert lost_after_warning(5400.0, 0.0, None) == 5400.0
    assert lost_after_warning(5400.0, 0.0, 5000.0) == 400.0


class _Forecast:
    """A pool-level forecast with a fixed quantile per hour (only what the ledger reads)."""

    def __init__(self, rows: list[float]) -> None:
        self.rows = rows

    def pool_quantile(self, pool: str, p: float) -> list[float]:
        return self.rows


def test_ledger_warns_once_per_lead_and_accounts_the_eviction() -> None:
    rt = _world()
    ledger = WarningLedger(WarningSettings(lead_s=600.0, quantile=0.95, margin=1.0, checkpoint_cost_s=60.0))
    # 1700 s: forecast 2 GPUs of HP in hour 0; spot holds all 4 -> 2 short -> warn B.
    assert ledger.check(1700.0, rt, _Forecast([2.0, 0.0])) == [TaskId("B")]  # type: ignore[arg-type]
    # 1800 s: still short, but B was warned 100 s ago (within the lead): nothing new.
    assert ledger.check(1800.0, rt, _Forecast([2.0, 0.0])) == []  # type: ignore[arg-type]
    assert rt.submit(a_task("H", gpus=2, submit=2000.0), 2000.0) is None
    stop = next(o for o in rt.schedule(2000.0).outcomes if isinstance(o, Stopped))
    assert (stop.task_id, stop.run_s) == ("B", 1000.0)
    ledger.evicted(a_spot("B", gpus=2), stop.run_s, 2000.0, 1000.0)
    s = ledger.summary()
    # B ran 1000 s: 1000 s lost without the warning, 300 s since the warning at 1700; 2 GPUs.
    assert s["lost_gpu_h"] == pytest.approx(2 * 1000 / 3600)
    assert s["lost_gpu_h_warned"] == pytest.approx(2 * 300 / 3600)
    assert s["lost_cut"] == pytest.approx(0.7)
    # One warning's checkpoint: 2 GPUs x 60 s.
    assert s["checkpoint_gpu_h"] == pytest.approx(2 * 60 / 3600)
    assert s["net_cut"] == pytest.approx(1 - (600 + 120) / 2000)
    assert (s["warnings"], s["warned_evictions"], s["recall"], s["precision"]) == (1.0, 1.0, 1.0, 1.0)


def test_ledger_without_shortfall_warns_nobody() -> None:
    rt = _world()
    ledger = WarningLedger()
    # Forecast 0 and nothing queued: HP needs none of spot's GPUs.
    assert ledger.check(1700.0, rt, _Forecast([0.0, 0.0])) == []  # type: ignore[arg-type]
    ledger.evicted(a_spot("B", gpus=2), 1000.0, 2000.0, 1000.0)
    s = ledger.summary()
    assert s["lost_cut"] == 0.0 and s["recall"] == 0.0 and math.isnan(s["precision"])


@pytest.mark.parametrize(
    "bad", [{"lead_s": 0.0}, {"quantile": 1.0}, {"margin": 0.0}, {"checkpoint_cost_s": -1.0}]
)
def test_settings_refuse_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        WarningSettings(**bad)
