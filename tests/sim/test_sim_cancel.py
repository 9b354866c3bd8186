"""Cancellations (a trace's cancel_time) in the engine, worked by hand.

One node n0 of 8 GPUs, pool P, GFS with the persistence forecast. No HP task ever runs in these
traces except where said, so the pool has no HP demand series and the quota is the capacity (8);
the window starts at 0 and ends at the horizon, max(submit + duration).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from typing import Any

import pytest
from builders import a_job, a_node, a_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.decision_log import DecisionLog
from gfs.services.simulator.engine import Simulation
from gfs.services.simulator.result import build_policy_result
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.records import Trace, TraceJob
from gfs.services.simulator.workload import build_workload

ONE_NODE = [a_node("n0", gpus=8)]


def cancelled_at(job: TraceJob, t: float) -> TraceJob:
    return dataclasses.replace(job, cancel_s=t)


def simulate(trace: Trace, policy: str = "gfs") -> tuple[Simulation, list[dict[str, Any]], dict[str, Any]]:
    settings = RunSettings()
    workload, demand = prepare(trace, settings)
    out = io.StringIO()
    log = DecisionLog(out, policy)
    sim = build_simulation(workload, demand, build_policy(policy), settings, log, log.cancelled)
    sim.run()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return sim, lines, build_policy_result(sim).metrics


# --- a queued task withdrawn ---------------------------------------------------------------------
# h1 (HP, 8 GPUs) holds the node over [0, 1000). s1 (spot, 4 GPUs, submit 100, 600 s) waits for it
# and is cancelled at 500: withdrawn (no node), having waited 400 s. Horizon 1000 (h1's end; s1's
# would be 700). h1 finishes; s1 never runs: 1 finished, 1 cancelled, 0 unfinished; no guarantee
# period at all; the spot queue delay is s1's 400 s.
def test_cancel_of_a_queued_task_withdraws_it() -> None:
    trace = a_trace(
        ONE_NODE,
        [
            a_job("h1", gpus=8, submit=0, duration=1000),
            cancelled_at(a_job("s1", cls="SPOT", gpus=4, submit=100, duration=600), 500),
        ],
    )
    sim, lines, metrics = simulate(trace)
    assert [(r["t"], r["task"], r["action"]) for r in lines] == [
        (0.0, "h1", "start"),
        (500.0, "s1", "cancel"),
    ]
    assert lines[1] == {
        "policy": "gfs",
        "t": 500.0,
        "pool": "P",
        "task": "s1",
        "action": "cancel",
        "node": None,
    }
    life = sim.lives[TaskId("s1")]
    assert (life.cancelled, life.wait) == (500.0, 400.0)
    assert (sim.cancelled_queued, sim.cancelled_running) == (1, 0)
    assert not sim.pools[life.spec.pool].tasks  # the runtime forgot it (and h1, finished)
    assert metrics["tasks_finished"] == 1.0
    assert metrics["tasks_cancelled"] == 1.0
    assert metrics["tasks_unfinished"] == 0.0
    assert metrics["lp_queue_delay_mean_s"] == 400.0
    assert metrics["lp_guarantee_periods"] == 0.0
    assert metrics["lp_gpu_hours_completed"] == 0.0
    assert metrics["pools"]["P"]["tasks_cancelled"] == 1.0
    assert sim.stop_s == 1000.0  # nothing outstanding after h1: no drain


# --- a running task stopped for good --------------------------------------------------------------
# s1 (spot, 4 GPUs, 10000 s) starts at 0 on GPUs 0-3 of n0; s2 (spot, 6 GPUs, submit 100, 1000 s)
# cannot be placed (4 free; 4 + 6 > quota 8 too). One guarantee period of s1 succeeds at 3600.
# s1 is cancelled at 4000: it stops (node n0), its interrupted period is void (no failure), it is
# not requeued; the pass at 4000 starts s2 on GPUs 0-5 (wait 3900), which ends at 5000 (one
# period, a success). The cancel line comes before that pass's lines. Horizon 10000: s1's finish
# event there is stale. Passes: 0 (s1 starts), 100 (s2 arrives, blocked), 4000 (s2 starts): 3.
# Periods: 2 successes, 0 failures. Spot waits 0 and 3900 -> mean 1950; JCT of the finished spot
# task s2 = 5000 - 100 = 4900; GPU-hours completed 6 x 1000 / 3600. Useful GPU time in the window
# [0, 10000): s1's completed period 4 x 3600 = 14400 plus s2's 6 x 1000 = 6000 -> 20400 / 80000.
def test_cancel_of_a_running_task_stops_it_for_good() -> None:
    trace = a_trace(
        ONE_NODE,
        [
            cancelled_at(a_job("s1", cls="SPOT", gpus=4, submit=0, duration=10000), 4000),
            a_job("s2", cls="SPOT", gpus=6, submit=100, duration=1000),
        ],
    )
    sim, lines, metrics = simulate(trace)
    assert lines == [
        {"policy": "gfs", "t": 0.0, "pool": "P", "pass": 1, "task": "s1", "action": "start",
         "placements": [{"node": "n0", "gpus": [0, 1, 2, 3]}]},
        {"policy": "gfs", "t": 4000.0, "pool": "P", "task": "s1", "action": "cancel", "node": "n0"},
        {"policy": "gfs", "t": 4000.0, "pool": "P", "pass": 3, "task": "s2", "action": "start",
         "placements": [{"node": "n0", "gpus": [0, 1, 2, 3, 4, 5]}]},
    ]  # fmt: skip
    s1, s2 = sim.lives[TaskId("s1")], sim.lives[TaskId("s2")]
    assert (s1.cancelled, s1.succeeded, s1.failed, s1.evictions) == (4000.0, 1, 0, 0)
    assert (s2.first_start, s2.end, s2.wait) == (4000.0, 5000.0, 3900.0)
    assert (sim.cancelled_queued, sim.cancelled_running) == (0, 1)
    assert metrics["tasks_finished"] == 1.0
    assert metrics["tasks_cancelled"] == 1.0
    assert metrics["tasks_unfinished"] == 0.0
    assert metrics["evictions"] == 0.0
    assert metrics["lp_eviction_rate"] == 0.0
    assert metrics["lp_guarantee_periods"] == 2.0
    assert metrics["lp_queue_delay_mean_s"] == 1950.0
    assert metrics["lp_jct_mean_s"] == 4900.0
    assert metrics["lp_gpu_hours_completed"] == pytest.approx(6000 / 3600)
    assert metrics["useful_gpu_time_rate"] == pytest.approx(20400 / 80000)


# --- a cancel at the finish instant, after the finish, at the submission --------------------------
# s1 (spot, 2 GPUs, 1000 s) finishes at 1000, the instant of its cancel: finishes come first, so
# the cancel finds it finished and does nothing (no line). s2 (2 GPUs, 500 s) is cancelled at 3000,
# long after its finish at 500: nothing either. s3 (2 GPUs, submit 200) is cancelled at its own
# submission: the arrival comes first, then the cancel withdraws it before any pass: waited 0, no
# start. Horizon 1000.
def test_cancels_of_finished_tasks_do_nothing_and_a_cancel_at_submit_withdraws() -> None:
    trace = a_trace(
        ONE_NODE,
        [
            cancelled_at(a_job("s1", cls="SPOT", gpus=2, submit=0, duration=1000), 1000),
            cancelled_at(a_job("s2", cls="SPOT", gpus=2, submit=0, duration=500), 3000),
            cancelled_at(a_job("s3", cls="SPOT", gpus=2, submit=200, duration=300), 200),
        ],
    )
    sim, lines, metrics = simulate(trace)
    assert [(r["t"], r["task"], r["action"], r.get("node")) for r in lines] == [
        (0.0, "s1", "start", None),
        (0.0, "s2", "start", None),
        (200.0, "s3", "cancel", None),
    ]
    assert sim.lives[TaskId("s1")].end == 1000.0
    assert sim.lives[TaskId("s3")].wait == 0.0
    assert sim.cancelled == [TaskId("s3")]
    assert (metrics["tasks_finished"], metrics["tasks_cancelled"], metrics["tasks_unfinished"]) == (2, 1, 0)


# --- a running HP gang: the line names its first worker's node; the HP queue moves ---------------
# Two nodes of 4 GPUs. g (HP, 2 workers x 4 GPUs) takes both at 0; h (HP, 4 GPUs, submit 60) waits.
# g is cancelled at 600: one line naming the node of its first worker, then h starts at 600 (waited
# 540 s: within the 600-s start SLO). Horizon 3600 (g's end).
def test_cancel_of_a_running_gang_names_its_first_node_and_frees_both() -> None:
    trace = a_trace(
        [a_node("n0", gpus=4), a_node("n1", gpus=4)],
        [
            cancelled_at(a_job("g", gpus=4, workers=2, submit=0, duration=3600), 600),
            a_job("h", gpus=4, submit=60, duration=600),
        ],
    )
    sim, lines, metrics = simulate(trace)
    start_g = lines[0]
    assert (start_g["task"], start_g["action"]) == ("g", "start")
    first_node = start_g["placements"][0]["node"]
    assert {p["node"] for p in start_g["placements"]} == {"n0", "n1"}
    assert lines[1] == {"policy": "gfs", "t": 600.0, "pool": "P", "task": "g", "action": "cancel",
                        "node": first_node}  # fmt: skip
    assert (lines[2]["t"], lines[2]["task"], lines[2]["action"]) == (600.0, "h", "start")
    assert sim.lives[TaskId("h")].wait == 540.0
    assert metrics["hp_slo_attainment"] == 1.0  # g started at once, h within 600 s
    assert (metrics["tasks_finished"], metrics["tasks_cancelled"]) == (1, 1)


# --- the HP start SLO and cancelled tasks ---------------------------------------------------------
# h0 (HP, 8 GPUs) holds the node over [0, 5000). h1 (HP, 8 GPUs, submit 100) is cancelled at 400
# (waited 300 s: it could still have met the SLO, so it is left out); h2 (submit 100) is cancelled
# at 1000 (waited 900 > 600 s: a miss). SLO: h0 met, h2 missed -> 1/2. HP waits 0, 300, 900.
def test_hp_slo_leaves_out_tasks_cancelled_unstarted_within_it() -> None:
    trace = a_trace(
        ONE_NODE,
        [
            a_job("h0", gpus=8, submit=0, duration=5000),
            cancelled_at(a_job("h1", gpus=8, submit=100, duration=100), 400),
            cancelled_at(a_job("h2", gpus=8, submit=100, duration=100), 1000),
        ],
    )
    _, _, metrics = simulate(trace)
    assert metrics["hp_slo_attainment"] == 0.5
    assert metrics["hp_queue_delay_mean_s"] == pytest.approx(1200 / 3)
    assert (metrics["tasks_finished"], metrics["tasks_cancelled"], metrics["tasks_unfinished"]) == (1, 2, 0)


def test_a_cancel_before_the_submission_is_an_error() -> None:
    trace = a_trace(ONE_NODE, [cancelled_at(a_job("j1", submit=100, duration=60), 50)])
    with pytest.raises(ValueError, match=r"j1: cancelled at 50.* before its submission at 100"):
        build_workload(trace)


def test_the_workload_carries_the_cancels_sorted_by_time() -> None:
    trace = a_trace(
        ONE_NODE,
        [
            cancelled_at(a_job("a", submit=0, duration=60), 90),
            a_job("b", submit=0, duration=60),
            cancelled_at(a_job("c", submit=10, duration=60), 30),
        ],
    )
    assert build_workload(trace).cancels == ((30.0, TaskId("c")), (90.0, TaskId("a")))


# --- invariants on random traces with cancellations ----------------------------------------------
JOB = st.tuples(
    st.sampled_from(["HP", "SPOT"]),
    st.sampled_from([0.25, 0.5, 1, 2, 4, 8]),
    st.integers(1, 2),
    st.integers(0, 200).map(lambda k: 20 * k),  # submit
    st.integers(3, 300).map(lambda k: 20 * k),  # duration
    st.none() | st.integers(0, 300).map(lambda k: 20 * k),  # cancel, after the submit
)


@settings(max_examples=30)
@given(st.lists(JOB, min_size=1, max_size=14), st.sampled_from(["gfs", "fifo", "chronus"]))
def test_every_task_ends_exactly_one_way_and_each_cancel_is_logged_once(
    jobs: list[tuple[str, float, int, int, int, int | None]], policy: str
) -> None:
    trace = a_trace(
        [a_node("n0", gpus=8), a_node("n1", gpus=4)],
        [
            dataclasses.replace(
                a_job(f"j{i:02d}", cls=c, gpus=g, workers=w, submit=s, duration=d),
                cancel_s=None if x is None else float(s + x),
            )
            for i, (c, g, w, s, d, x) in enumerate(jobs)
        ],
    )
    sim, lines, metrics = simulate(trace, policy)
    running = {t for rt in sim.pools.values() for t in rt.state.running}
    queued = {t for rt in sim.pools.values() for t in rt.queued_ids()}
    cancel_lines = [r for r in lines if r["action"] == "cancel"]
    assert [r["task"] for r in cancel_lines] == sim.cancelled  # one line each, in order
    assert len(set(sim.cancelled)) == len(sim.cancelled)
    for spec in sim.w.tasks:
        life = sim.lives[spec.task_id]
        finished, cancelled = not math.isnan(life.end), not math.isnan(life.cancelled)
        states = [finished, cancelled, spec.task_id in running, spec.task_id in queued]
        assert sum(states) == 1, (spec.task_id, states)
        if cancelled:
            assert spec.task_id not in sim.pools[spec.pool].tasks
            assert life.cancelled >= spec.submit_s
        if finished and (job := next(j for j in trace.jobs if j.name == spec.task_id)).cancel_s is not None:
            assert life.end <= job.cancel_s  # a cancel at or after the finish changes nothing
    n = len(sim.w.tasks)
    assert metrics["tasks_finished"] + metrics["tasks_cancelled"] + metrics["tasks_unfinished"] == n
    for r in cancel_lines:  # a running task's line names a node of the pool; a queued one's is null
        assert r["node"] is None or r["node"] in {"n0", "n1"}
    times = [r["t"] for r in lines]
    assert times == sorted(times)
