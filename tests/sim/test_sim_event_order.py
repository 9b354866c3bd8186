"""The canonical order of equal-time events: arrivals, then FINISH, PERIOD, CANCEL, QUOTA, SAMPLE,
WINDOW_START, WINDOW_END, LEASE (equal kinds in push order), then one pass per changed pool. The
live pipeline plays an instant the same way, so both logs agree."""

from __future__ import annotations

import io
import json
from typing import Any

from builders import a_job, a_node, a_trace

from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator import engine
from gfs.services.simulator.decision_log import DecisionLog
from gfs.services.simulator.engine import Simulation
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.records import Trace


def simulate(
    trace: Trace, settings: RunSettings, policy: str = "gfs"
) -> tuple[Simulation, list[dict[str, Any]]]:
    workload, demand = prepare(trace, settings)
    out = io.StringIO()
    log = DecisionLog(out, policy)
    sim = build_simulation(workload, demand, build_policy(policy), settings, log, log.cancelled)
    sim.run()
    return sim, [json.loads(line) for line in out.getvalue().splitlines()]


def test_kinds_are_ordered_as_the_live_pipeline_plays_an_instant() -> None:
    kinds = [
        engine.FINISH,
        engine.PERIOD,
        engine.CANCEL,
        engine.QUOTA,
        engine.SAMPLE,
        engine.WINDOW_START,
        engine.WINDOW_END,
        engine.LEASE,
    ]
    assert kinds == sorted(kinds) and len(set(kinds)) == len(kinds)


# One node of 8 GPUs, GFS, persistence forecast of the observed HP demand (no history in hour 0:
# the forecast is 0, floored at the HP GPUs running plus queued now). Quota refreshes at 0, 300,
# 600, 900, ... (window [0, 1300): the horizon is s1's 300 + 1000).
# At 300: h1 (HP, 4 GPUs, 300 s) and s1 (spot, 8 GPUs, 1000 s) arrive; the refresh at 300 sees h1
# queued: quota 8 - 4 = 4. The pass starts h1 (ends 600); s1 is over quota and does not fit.
# At 600 h1's finish and the refresh coincide. The refresh event was pushed at 300 before h1's
# finish (pushed by the pass at 300), but finishes come first: the refresh sees no HP, the quota is
# 8 and s1 starts at 600. (In push order the quota would stay 4 until 900 and s1 start only then.)
def test_a_quota_refresh_sees_a_finish_at_the_same_instant() -> None:
    trace = a_trace(
        [a_node("n0", gpus=8)],
        [
            a_job("h1", gpus=4, submit=300, duration=300),
            a_job("s1", cls="SPOT", gpus=8, submit=300, duration=1000),
        ],
    )
    sim, lines = simulate(trace, RunSettings())
    assert [(r["t"], r["task"], r["action"]) for r in lines] == [
        (300.0, "h1", "start"),
        (600.0, "s1", "start"),
    ]
    quota = dict(zip(sim.recorder.times, (q[0] for q in sim.recorder.quota), strict=True))
    assert (quota[240.0], quota[300.0], quota[540.0], quota[600.0]) == (8.0, 4.0, 4.0, 8.0)


# The window starting after a warm-up pushes a quota refresh at its own instant, applied before the
# pass. Window [3600, 46800) (--window-end-s 46800, half a day). h0 (HP, 6 GPUs) runs from 0; hq
# (HP, 4 GPUs) cannot fit and waits (no preemption before the window, no spot to evict in it).
# Before the window the quota is the initial one, the capacity (8). s1 (spot, 1 GPU) arrives at
# 3600, the window start: the refresh at 3600 sees 6 + 4 = 10 HP GPUs running or queued -> quota
# 8 - min(10, 8) = 0, so the pass at 3600 holds s1 back although 2 GPUs are free. (Issue 10's
# floor, gfs-observed-demand: under gfs's servable floor hq, which cannot start within the
# period, would not count, the quota would be 2 either way and the order would not show.)
def test_the_window_start_refreshes_the_quota_before_its_pass() -> None:
    trace = a_trace(
        [a_node("n0", gpus=8)],
        [
            a_job("h0", gpus=6, submit=0, duration=20000),
            a_job("hq", gpus=4, submit=0, duration=100),
            a_job("s1", cls="SPOT", gpus=1, submit=3600, duration=100),
        ],
    )
    sim, lines = simulate(trace, RunSettings(window_days=0.5, window_end_s=46800.0), "gfs-observed-demand")
    assert (sim.w.window_start_s, sim.w.window_end_s) == (3600.0, 46800.0)
    assert not [r for r in lines if r["task"] == "s1" and r["t"] == 3600.0]
    assert sim.lives["s1"].first_start > 3600.0  # type: ignore[index]
    assert sim.recorder.times[0] == 3600.0 and sim.recorder.quota[0] == [0.0]
