"""Warnings change no decision (issue 27 item 2): the same run with and without warning ledgers
attached gives identical metrics, and the ledgers see every eviction the simulator makes."""

from __future__ import annotations

from builders import a_job, a_node, a_trace

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.reclaim_warning import WarningSettings
from gfs.services.simulator.reclaim_warnings import WarningLedger
from gfs.services.simulator.result import build_policy_result
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare

# One 8-GPU node: spot work fills it in the first hours, then HP arrives in waves and takes GPUs
# back (each HP job needs spot's GPUs: evictions).
TRACE = a_trace(
    [a_node("n0", gpus=8)],
    [a_job(f"s{i}", cls="SPOT", gpus=2, submit=600.0 * i, duration=4 * 3600.0) for i in range(8)]
    + [a_job(f"h{i}", gpus=4, submit=5400.0 + 2400.0 * i, duration=1800.0) for i in range(4)],
    horizon=8 * 3600.0,
)


def _run(ledgers: tuple[WarningLedger, ...]) -> dict[str, object]:
    settings = RunSettings(window_days=8 / 24, drain_days=0.0)
    workload, demand = prepare(TRACE, settings)
    sim = build_simulation(workload, demand, build_policy("gfs"), settings)
    sim.warnings = ledgers
    sim.run()
    metrics = dict(build_policy_result(sim).metrics)
    metrics.pop("sim_wall_s")  # wall time, not a decision
    return metrics


def test_ledgers_change_no_decision_and_see_every_eviction() -> None:
    plain = _run(())
    ledgers = (WarningLedger(WarningSettings(quantile=0.5)), WarningLedger(WarningSettings(quantile=0.99)))
    watched = _run(ledgers)
    assert watched == plain
    assert plain["evictions"] > 0  # the trace does evict: the comparison means something
    for ledger in ledgers:
        assert ledger.evictions == plain["evictions"]
        assert ledger.checks > 0
