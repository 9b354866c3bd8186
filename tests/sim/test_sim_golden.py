"""Golden traces: tiny traces whose metrics are worked out by hand (the working is in comments).

Common facts used below:
- window = the last 31 days of the trace, so for these short traces it starts at 0 and ends at
  the trace horizon (max submit + duration); the drain ends when every window task is done;
- the spot quota is refreshed at every multiple of 300 s; GFS with `persistence` and no history
  (end_hour 0) forecasts 0 HP demand -> quota = capacity;
- an HP task that needed evictions runs 40 s longer (restart overhead, <= 8 GPUs per worker);
- an evicted spot task keeps its work up to the last hourly checkpoint and pays 40 s;
- allocation is sampled every 60 s from the window start to before the window end, after the
  decisions taken at that instant.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from builders import a_job, a_node, a_trace

from gfs.services.simulator.runner import ForecastSource, RunSettings, run_policies
from gfs.services.simulator.traces.records import Trace


@dataclass(frozen=True)
class Golden:
    id: str
    trace: Trace
    policy: str
    forecast: ForecastSource
    expected: dict[str, float]


ONE_NODE = [a_node("n0", gpus=8)]

# --- 1. one preemption --------------------------------------------------------------------------
# s1 (spot, 8 GPUs, 7200 s) starts at 0 (quota 8). At 3600 one period succeeds. h1 (HP, 4 GPUs,
# 3600 s) arrives at 5400: nothing is free, so s1 is evicted (the only spot task; gfs and fifo
# agree). h1 starts at 5400 with 3640 s to run -> ends 9040.
# s1 at eviction: ran 5400 s -> 1 success (already logged), 1 failure; remaining = 7200 - 5400 +
# (5400 mod 3600 = 1800) + 40 = 3640. It needs 8 GPUs, only 4 are free until h1 ends at 9040
# (after the window end 9000, quota checks off) -> restarts at 9040, ends 12680: periods at 12640
# (success) and the finish (ceil(3640/3600) = 2 -> one more success). Successes 1+1+1 = 3.
# lp_eviction_rate = 1 / (1 + 3) = 0.25; LP wait = 0 + (9040 - 5400) = 3640; LP JCT 12680.
# HP wait 0 -> SLO 1. Allocation: samples 0..8940 (150); 0..5340 (90) at 8/8, 5400..8940 (60) at
# 4/8 -> (90 + 30) / 150 = 0.8. Useful: HP 4 * (9000 - 5400) = 14400; s1's first run keeps one
# completed period 8 * 3600 = 28800; its second run is after the window -> 43200 / (8 * 9000) = 0.6.
# Completed spot GPU-hours = 8 * 7200 / 3600 = 16.
PREEMPT_ONCE = a_trace(
    ONE_NODE,
    [
        a_job("s1", cls="SPOT", gpus=8, submit=0, duration=7200),
        a_job("h1", gpus=4, submit=5400, duration=3600),
    ],
)
PREEMPT_ONCE_EXPECTED = {
    "lp_eviction_rate": 0.25,
    "lp_queue_delay_mean_s": 3640.0,
    "lp_jct_mean_s": 12680.0,
    "hp_queue_delay_mean_s": 0.0,
    "hp_slo_attainment": 1.0,
    "gpu_allocation_rate": 0.8,
    "useful_gpu_time_rate": 0.6,
    "lp_gpu_hours_completed": 16.0,
    "evictions": 1.0,
    "tasks_finished": 2.0,
    "tasks_unfinished": 0.0,
}

# --- 2. the forecast keeps spot away from a coming HP peak --------------------------------------
# s1 (spot, 8 GPUs, 1800 s) at 0; h1 (HP, 8 GPUs, 1200 s) at 600. Horizon 1800 = window end.
# gfs-trace-demand + oracle (the oracle knows only the trace-defined demand, the paper's setting):
# hour 0's HP demand peak is 8 -> quota = 8 - 8 = 0 -> s1 waits. h1 starts at 600,
# ends 1800; at 1800 the window ends (quota off) and s1 starts, ends 3600 (1 success, no failure).
#   eviction 0; LP wait 1800; LP JCT 3600; allocation: samples 0..1740 (30): 10 idle, 20 full ->
#   2/3. Useful: HP 8 * 1200 = 9600 of 8 * 1800 -> 2/3.
# fifo: s1 starts at 0; h1 at 600 evicts it (ran 600 s: no success, 1 failure; remaining 1800 -
# 600 + 600 + 40 = 1840); h1 runs 1240 s -> ends 1840; s1 restarts at 1840, ends 3680 (1 success).
#   eviction 1/2; LP wait 1840 - 600 = 1240; LP JCT 3680; allocation 1.0 (s1 then h1 hold all 8);
#   useful: HP 8 * (1800 - 600) = 9600 (s1's first run has no completed period) -> 2/3.
PEAK_AHEAD = a_trace(
    ONE_NODE,
    [
        a_job("s1", cls="SPOT", gpus=8, submit=0, duration=1800),
        a_job("h1", gpus=8, submit=600, duration=1200),
    ],
)

# --- 3. which victim: GFS spares the task with more GPU time at stake ---------------------------
# a (spot, 4 GPUs) and b (spot, 2 GPUs) start at 0 (10000 s each); h (HP, 4 GPUs, 2000 s) at 1000.
# gfs two-pointer on the node: G = 2 idle + a's 4 + b's 2; costs a 4000 > b 2000; sparing a
# leaves 4 >= 4 -> spare a; sparing b would leave 2 -> evict b. fifo evicts in placement order:
# a first (2 idle + 4 = 6 >= 4). h ends at 1000 + 2040 = 3040; the victim restarts then with
# 10000 - 1000 + 1000 + 40 = 10040 s to go (ends 13080); the other ends at 10000 = window end.
# Both: 1 failure; successes: the survivor 3 (10000 s), the victim 3 (10040 s) -> rate 1/7;
# LP waits 0 and 2040 -> mean 1020.
# Useful time over the window [0, 10000), C * T = 80000: HP 4 * 2040 = 8160.
#   gfs: a 4 * 10000 = 40000; b's second run 2 * (10000 - 3040) = 13920 -> 62080 / 80000 = 0.776
#   fifo: b 2 * 10000 = 20000; a's second run 4 * 6960 = 27840 -> 56000 / 80000 = 0.7
# gfs (default, observed-demand floor): while h runs, the quota refreshed every 300 s is
# 8 - 4 = 4 GPUs with a's 4 in use, so b restarts only at the first refresh after h ends (3300):
# b's wait 2300 -> mean 1150; b ends at 3300 + 10040 = 13340 (3 successes either way);
# useful b 2 * (10000 - 3300) = 13400 -> (8160 + 40000 + 13400) / 80000 = 0.7695.
WHICH_VICTIM = a_trace(
    ONE_NODE,
    [
        a_job("a", cls="SPOT", gpus=4, submit=0, duration=10000),
        a_job("b", cls="SPOT", gpus=2, submit=0, duration=10000),
        a_job("h", gpus=4, submit=1000, duration=2000),
    ],
)

# --- 4. HP-only warm-up: spot before the window dropped; only window tasks counted --------------
# Horizon 40 days (h-long ends at 40 d); window = the last 31 days = [9 d, 40 d).
# s-early (spot, submit 1 d) is dropped (before the window) -> 0 LP tasks. h-long (HP, 8 GPUs)
# runs [0, 40 d) and is not counted (submitted before the window). h-late (HP, 4 GPUs, submit
# 10 d, 1 d) waits until h-long ends at 40 d: wait 30 d = 2592000 s; SLO 0; ends 41 d.
# Allocation is 1.0 (h-long holds all 8 GPUs through the window).
DAY = 86400.0
WARM_UP = a_trace(
    ONE_NODE,
    [
        a_job("h-long", gpus=8, submit=0, duration=40 * DAY),
        a_job("s-early", cls="SPOT", gpus=1, submit=1 * DAY, duration=3600),
        a_job("h-late", gpus=4, submit=10 * DAY, duration=1 * DAY),
    ],
)

# --- 5. a task still running at the stop ------------------------------------------------------
# h-long (HP, 8 GPUs) [0, 10 d); h2 (HP, 8 GPUs, submit 1 d, 9 d). Horizon 10 d, window [0, 10 d).
# h2 starts when h-long ends (10 d) and would end at 19 d, after the drain stop (10 d + 7 d = 17 d):
# it is counted unfinished, with its wait 10 d - 1 d = 9 d. HP waits 0 and 777600 -> mean 388800;
# SLO 1/2; 1 finished, 1 unfinished; allocation 1.0.
UNFINISHED = a_trace(
    ONE_NODE,
    [
        a_job("h-long", gpus=8, submit=0, duration=10 * DAY),
        a_job("h2", gpus=8, submit=1 * DAY, duration=9 * DAY),
    ],
)

CASES = [
    Golden("preempt-once-gfs", PREEMPT_ONCE, "gfs", ForecastSource.PERSISTENCE, PREEMPT_ONCE_EXPECTED),
    Golden("preempt-once-fifo", PREEMPT_ONCE, "fifo", ForecastSource.PERSISTENCE, PREEMPT_ONCE_EXPECTED),
    Golden(
        "peak-ahead-gfs-oracle",
        PEAK_AHEAD,
        "gfs-trace-demand",
        ForecastSource.ORACLE,
        {
            "lp_eviction_rate": 0.0,
            "lp_queue_delay_mean_s": 1800.0,
            "lp_jct_mean_s": 3600.0,
            "gpu_allocation_rate": 2 / 3,
            "useful_gpu_time_rate": 2 / 3,
            "evictions": 0.0,
            "hp_queue_delay_mean_s": 0.0,
        },
    ),
    Golden(
        "peak-ahead-fifo",
        PEAK_AHEAD,
        "fifo",
        ForecastSource.ORACLE,
        {
            "lp_eviction_rate": 0.5,
            "lp_queue_delay_mean_s": 1240.0,
            "lp_jct_mean_s": 3680.0,
            "gpu_allocation_rate": 1.0,
            "useful_gpu_time_rate": 2 / 3,
            "evictions": 1.0,
            "hp_queue_delay_mean_s": 0.0,
        },
    ),
    Golden(
        "which-victim-gfs",
        WHICH_VICTIM,
        "gfs",
        ForecastSource.PERSISTENCE,
        {
            "lp_eviction_rate": 1 / 7,
            "lp_queue_delay_mean_s": 1150.0,
            "useful_gpu_time_rate": 0.7695,
            "evictions": 1.0,
        },
    ),
    Golden(
        "which-victim-gfs-paper",
        WHICH_VICTIM,
        "gfs-paper",
        ForecastSource.PERSISTENCE,
        {
            "lp_eviction_rate": 1 / 7,
            "lp_queue_delay_mean_s": 1020.0,
            "useful_gpu_time_rate": 0.776,
            "evictions": 1.0,
        },
    ),
    Golden(
        "which-victim-fifo",
        WHICH_VICTIM,
        "fifo",
        ForecastSource.PERSISTENCE,
        {
            "lp_eviction_rate": 1 / 7,
            "lp_queue_delay_mean_s": 1020.0,
            "useful_gpu_time_rate": 0.7,
            "evictions": 1.0,
        },
    ),
    Golden(
        "warm-up-gfs",
        WARM_UP,
        "gfs",
        ForecastSource.PERSISTENCE,
        {
            "hp_queue_delay_mean_s": 30 * DAY,
            "hp_slo_attainment": 0.0,
            "tasks_unfinished": 0.0,
            "hp_tasks": 1.0,
            "lp_tasks": 0.0,
            "gpu_allocation_rate": 1.0,
            "evictions": 0.0,
        },
    ),
    Golden(
        "unfinished-at-stop-fifo",
        UNFINISHED,
        "fifo",
        ForecastSource.PERSISTENCE,
        {
            "hp_queue_delay_mean_s": 388800.0,
            "hp_slo_attainment": 0.5,
            "tasks_finished": 1.0,
            "tasks_unfinished": 1.0,
            "gpu_allocation_rate": 1.0,
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Golden) -> None:
    result = run_policies(case.trace, [case.policy], RunSettings(forecast=case.forecast))
    metrics = result.policies[case.policy].metrics
    got = {k: metrics[k] for k in case.expected}
    assert got == pytest.approx(case.expected)
