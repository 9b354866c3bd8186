"""Issue 22 item 10: the spot stall, in the simulator, worked by hand.

Pool P: 4 nodes of 8 GPUs (32). Horizon 2 days, so the window is [0, 172800) and quota checks
hold throughout it. The quota is refreshed every 300 s; the persistence forecast of observed HP
demand; feedback window 4 h, min_periods 20, head_wait_s 3600.

- t=0: 20 one-GPU spot tasks s00..s19 and three four-GPU spot tasks b1..b3 fill the pool
  (quota 32: no HP demand yet, eta 1).
- t=600: four 8-GPU HP tasks h1..h4 find nothing free and evict all 23 spot tasks: 23 failed
  periods at 600 (no period had completed). The refresh at 900 sees 23 outcomes, ER = 1 >= 0.15:
  eta = 1 x 0.1 / 1 = 0.1, the floor. h1..h4 run 3600 s + 40 s of restart overhead: to 4240.
- t=1200: the owners of s00..s19 cancel them (queued, withdrawn). b1..b3 (4 GPUs each, queued
  since 600) remain.
- Every GPU is idle after 4240. The forecast keeps hour 1's HP peak (32) until hour 2 completes;
  from the refresh at 10800 the spare is 32 and the quota 0.1 x 32 = 3.2 < 4: each b is held by
  the quota (over quota since 600).
- The 23 failures leave the window at 600 + 4 h = 15000; until then ER = 1 keeps eta at the floor.

Issue 35's progress floor (gfs): a pool running no spot admits at least the smallest queued spot
task the forecast's spare holds. From the refresh at 10800 nothing runs and the spare is 32: Q =
max(3.2, 4) = 4 and b1 starts at 10800. It runs 10800 - 600 + 600 (lost since its checkpoint) + 40
= 10840 s, to 21640; while it runs the floor is off (spot runs) and Q = 3.2 holds b2 and b3.
(Eta shrank once, at 900, on the 23 new failures; issue 35 keeps it there rather than shrinking
again at every refresh on the same ones: it is at the floor either way.)

Eta's recovery (issue 22): at 15000 the window is empty (sparse), the quota held b2 for 14400 s >
3600, ER_lo = 0: eta x 1.5 each refresh while a b waits, b1's 4 GPUs running.
  15000: eta 0.15,   Q = 4.8  -> 4 + 4 > 4.8, nothing.
  15300: eta 0.225,  Q = 7.2  -> 8 > 7.2, nothing.
  15600: eta 0.3375, Q = 10.8 -> b2 (8 <= 10.8) starts; b3 would make 12 > 10.8.
  15900: eta 0.50625, Q = 16.2 -> b3 starts.
Without the floor (gfs-no-progress-floor) b1 waits for the same recovery: 15000 (Q = 4.8), and b2
and b3 as above.
Without the recovery (gfs-no-eta-recovery): the window holds fewer than 20 outcomes from 15000 on,
so eta stays 0.1 and only the floor moves spot: b2 at the first refresh after b1 ends (21900), b3
after b2 (21900 + 10840 = 32740: 33000). Before issue 35 (no floor either) the b tasks started only
when the window ended at 172800, with 32 GPUs idle for the 47 hours between.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from builders import a_job, a_node, a_trace

from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.decision_log import DecisionLog
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.records import Trace

HORIZON = 172800.0


def _trace() -> Trace:
    nodes = [a_node(f"n{i}", gpus=8) for i in range(4)]
    small = [
        dataclasses.replace(
            a_job(f"s{i:02d}", cls="SPOT", gpus=1, submit=0.0, duration=36000.0), cancel_s=1200.0
        )
        for i in range(20)
    ]
    big = [a_job(f"b{i}", cls="SPOT", gpus=4, submit=0.0, duration=10800.0) for i in (1, 2, 3)]
    hp = [a_job(f"h{i}", gpus=8, submit=600.0, duration=3600.0) for i in (1, 2, 3, 4)]
    return a_trace(nodes, small + big + hp, horizon=HORIZON)


def _starts(policy: str) -> dict[str, list[float]]:
    settings = RunSettings()
    workload, demand = prepare(_trace(), settings)
    out = io.StringIO()
    log = DecisionLog(out, policy)
    build_simulation(workload, demand, build_policy(policy), settings, log, log.cancelled).run()
    starts: dict[str, list[float]] = {}
    for line in out.getvalue().splitlines():
        d = json.loads(line)
        if d.get("action") == "start":
            starts.setdefault(d["task"], []).append(d["t"])
    return starts


@pytest.mark.parametrize(
    ("policy", "b_starts"),
    [
        ("gfs", {"b1": 10800.0, "b2": 15600.0, "b3": 15900.0}),
        ("gfs-no-progress-floor", {"b1": 15000.0, "b2": 15600.0, "b3": 15900.0}),
        ("gfs-no-eta-recovery", {"b1": 10800.0, "b2": 21900.0, "b3": 33000.0}),
    ],
)
def test_spot_held_by_a_floor_quota_starts_once_the_evictions_leave_the_window(
    policy: str, b_starts: dict[str, float]
) -> None:
    starts = _starts(policy)
    assert all(starts[f"h{i}"] == [600.0] for i in (1, 2, 3, 4))
    # Every b started at 0, was evicted at 600, and started again at the worked time.
    assert {b: starts[b] for b in b_starts} == {b: [0.0, t] for b, t in b_starts.items()}
