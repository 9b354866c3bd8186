"""Tenant eviction budgets set in the simulator's settings (issue 27 item 3), worked by hand, and
the evaluation's fairness numbers (services/simulator/budget_eval.py).

Two 1-GPU nodes of pool P, GFS. sA (tenant x) starts at 0 on one node, sB (tenant y) at 100 on the
other; at 1000 the HP task h1 (1 GPU) needs one of them. Both runs give the same eviction-rate
term (one victim, no period closed yet), so the lost GPU time decides: sB ran 900 s, sA 1000 s,
so sB goes. With y's budget at 0 evictions a day, sA goes instead.
"""

from __future__ import annotations

import io
import json

import pytest
from builders import a_job, a_node, a_trace

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.tenant_budget import BudgetWindow, TenantBudget
from gfs.services.simulator.budget_eval import gini, spread
from gfs.services.simulator.decision_log import DecisionLog
from gfs.services.simulator.engine import SimSettings, Simulation
from gfs.services.simulator.runner import RunSettings, build_forecaster, demand_for, prepare

TRACE = a_trace(
    [a_node("n0", gpus=1), a_node("n1", gpus=1)],
    [
        a_job("sA", cls="SPOT", submit=0, duration=10_000, org="x"),
        a_job("sB", cls="SPOT", submit=100, duration=10_000, org="y"),
        a_job("h1", submit=1000, duration=500, org="hp"),
    ],
)


def _evicted(settings: SimSettings) -> list[str]:
    run = RunSettings()
    workload, trace_demand = prepare(TRACE, run)
    policy = build_policy("gfs")
    demand = demand_for(policy, workload, trace_demand)
    out = io.StringIO()
    log = DecisionLog(out, "gfs")
    Simulation(workload, policy, build_forecaster(run, demand), demand, settings, log, log.cancelled).run()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [r["task"] for r in lines if r["action"] == "evict"]


@pytest.mark.parametrize(
    ("settings", "evicted"),
    [
        (SimSettings(), ["sB"]),
        (SimSettings(tenant_budgets=(("y", TenantBudget(0)),)), ["sA"]),
        (SimSettings(tenant_budgets=(("y", TenantBudget(1)),)), ["sB"]),
        (
            SimSettings(every_tenant_budget=TenantBudget(0, BudgetWindow.PERIODS)),
            ["sB"],
        ),  # all out: least over
        # Every tenant at 1 a day, y at 0: the named budget wins over the default.
        (SimSettings(tenant_budgets=(("y", TenantBudget(0)),), every_tenant_budget=TenantBudget(1)), ["sA"]),
    ],
)
def test_the_simulator_applies_the_tenant_budgets_of_its_settings(
    settings: SimSettings, evicted: list[str]
) -> None:
    assert _evicted(settings) == evicted


def test_gini_and_spread_by_hand() -> None:
    assert gini([1.0, 1.0, 1.0]) == 0.0
    # [0, 0, 3]: mean absolute difference over the 9 ordered pairs = (4 * 3) / 9 = 4/3; / (2 * 1) = 2/3.
    assert gini([0.0, 3.0, 0.0]) == pytest.approx(2 / 3)
    # [1, 3]: pairs |1-3| twice over 4 = 1; mean 2 -> 1 / 4.
    assert gini([3.0, 1.0]) == pytest.approx(0.25)
    assert gini([]) == 0.0 and gini([0.0, 0.0]) == 0.0
    s = spread([0.1, 0.3])
    assert (s["max"], s["min"], s["std"], s["tenants"]) == pytest.approx((0.3, 0.1, 0.1, 2.0))
