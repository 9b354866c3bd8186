"""Chronus's lease renewal (the runtime's lease step, driven by the simulator), next to GFS on the same
tiny traces. Expected outcomes worked out by hand in the comments (lease 1200 s, re-lease overhead
120 s, checkpoints every 3600 s, guarantee period 3600 s, GFS restart overhead 40 s)."""

from __future__ import annotations

from typing import Any

import pytest

from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode

HORIZON_S = 20_000.0


def _job(name: str, cls: str, gpus: float, submit: float, duration: float) -> TraceJob:
    return TraceJob(
        name=name,
        organization="o",
        gpu_model="P",
        cpu_request=1.0,
        gpus_per_worker=gpus,
        workers=1,
        submit_s=submit,
        duration_s=duration,
        job_class=cls,  # type: ignore[arg-type]
    )


def _run(policy_name: str, node_gpus: int, jobs: list[TraceJob]) -> tuple[Any, dict[str, dict[str, float]]]:
    trace = Trace(nodes=(TraceNode("n0", "P", node_gpus, 8),), jobs=tuple(jobs), horizon_s=HORIZON_S)
    settings = RunSettings(window_days=HORIZON_S / 86400.0, drain_days=1.0)
    workload, demand = prepare(trace, settings)
    policy = build_policy(policy_name)
    sim = build_simulation(workload, demand, policy, settings)
    sim.run()
    return sim, {"hp_wait": {tid: life.wait for tid, life in sim.lives.items()}}


SPOT_THEN_HP = [_job("S", "SPOT", 1, 0.0, 5000.0), _job("H", "HP", 1, 100.0, 600.0)]


def test_chronus_hp_waits_for_the_lease_and_spot_fails_its_period() -> None:
    # 1 GPU. S starts at 0. H arrives at 100: no mid-lease preemption, it waits. Renewal at 1200:
    # HP first, H takes the GPU; S is not renewed inside its first period -> 1 failure; S keeps
    # 5000 - 1200 + (1200 mod 3600) + 120 = 5120 s of work. H ends at 1800 (waited 1100 s); S runs
    # 1800 -> 6920, renewed seamlessly at every later lease: a success at 5400 and one at the finish.
    sim, out = _run("chronus", 1, SPOT_THEN_HP)
    s, h = sim.lives["S"], sim.lives["H"]
    assert out["hp_wait"]["H"] == pytest.approx(1100.0)
    assert (s.failed, s.succeeded) == (1, 2)
    assert s.end == pytest.approx(6920.0)
    assert h.end == pytest.approx(1800.0)


def test_gfs_preempts_at_once_on_the_same_trace() -> None:
    # GFS: H preempts S at 100 (S: 1 failure, 5000 - 100 + 100 + 40 = 5040 s left); H runs 100 ->
    # 740 with the 40 s overhead and waited 0. The quota refreshes every 300 s: at 300 and 600 the
    # running H is the HP-usage floor (1 GPU of 1), so the quota is 0; at 900 H is gone and S
    # restarts, finishing at 900 + 5040 = 5940. Without the floor (gfs-paper) S restarts at 740.
    sim, out = _run("gfs", 1, SPOT_THEN_HP)
    assert out["hp_wait"]["H"] == pytest.approx(0.0)
    assert sim.lives["H"].end == pytest.approx(740.0)
    assert sim.lives["S"].end == pytest.approx(5940.0)
    assert _run("gfs-paper", 1, SPOT_THEN_HP)[0].lives["S"].end == pytest.approx(5780.0)
    assert (sim.lives["S"].failed, sim.lives["S"].succeeded) == (1, 2)


def test_chronus_hp_queue_time_accumulates_across_leases() -> None:
    # 2 GPUs. H1 (1 GPU, 5000 s) starts at 0. H2 (2 GPUs) arrives at 100 and waits (1 GPU free).
    # Renewal at 1200: order (-gpus): H2 first takes both GPUs; H1 is not renewed and waits again
    # from 1200. H2 ends at 1800; H1 restarts then: total wait 0 + 600 = 600 s; H2 waited 1100 s.
    sim, out = _run("chronus", 2, [_job("H1", "HP", 1, 0.0, 5000.0), _job("H2", "HP", 2, 100.0, 600.0)])
    assert out["hp_wait"]["H1"] == pytest.approx(600.0)
    assert out["hp_wait"]["H2"] == pytest.approx(1100.0)
    # H1 lost 1200 s since its last checkpoint plus 120 s: it ends at 1800 + 5000 + 120.
    assert sim.lives["H1"].end == pytest.approx(6920.0)
    assert sim.lease_stops == 1


def test_a_lone_task_is_renewed_without_loss() -> None:
    # One spot task alone for 5000 s: renewed at 1200, 2400, 3600, 4800 with no loss: it ends at
    # 5000 with a success at 3600 and one at the finish, no failure.
    sim, _ = _run("chronus", 1, [_job("S", "SPOT", 1, 0.0, 5000.0)])
    s = sim.lives["S"]
    assert (s.end, s.failed, s.succeeded) == (pytest.approx(5000.0), 0, 2)
    assert sim.lease_renewals >= 4 and sim.lease_stops == 0
