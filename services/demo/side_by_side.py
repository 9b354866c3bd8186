"""The demo's closing table: the live run beside the simulator's policies on the same sample.

The simulator replays the sample (`gfs simulate` with its defaults: persistence forecast, the
whole sample inside the evaluation window, drained to the end) under FIFO, k8s-priority and GFS.
The live run is measured from its own decision journal (`preemption_decision`), in the sample's
time: a wall second of a replay at `speed`x is `speed` seconds of the sample. The measures follow
the simulator's definitions (services/core/metrics.py):

- spot evictions: evictions of spot tasks to make room for HP;
- spot / HP queueing: per task, the wait from acceptance to its first start plus every wait from
  an eviction to the next start, averaged over the class's tasks; a task still waiting when the run
  stops counts its wait up to then (censored, as the simulator does at its stop);
- spot GPU-hours completed: GPUs x the work the sample gives each spot task that finished.

The live run stops soon after the replay ends while the simulator drains every task, so live
columns cover less work; the table says how many tasks each row finished. Decision-for-decision
equality with the simulator holds on the controllable clock (`gfs parity run`, docs/parity.md);
on wall time the live service decides at the instants its inputs arrive, so its numbers differ.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gfs.services.simulator.traces.records import Trace

SIM_POLICIES = ("fifo", "k8s-priority", "gfs")


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table; times in seconds of the sample."""

    name: str
    spot_evictions: int
    spot_queue_mean_s: float
    hp_queue_mean_s: float
    spot_gpu_hours_completed: float
    finished: int
    tasks: int
    # GPU-hours left idle while a queued spot task fitted, by why (simulated rows only: the
    # simulator's work-conservation audit, services/core/work_conservation.py); the verdict's "why".
    idle_while_fits: dict[str, float] = field(default_factory=dict)


def simulated(sample: Path, policies: Sequence[str] = SIM_POLICIES) -> list[Row]:
    """The simulator's rows on `sample` (a few seconds for the bundled one)."""
    from gfs.services.simulator.runner import RunSettings, run_policies
    from gfs.services.simulator.traces.gfs_format import load_gfs_trace

    result = run_policies(load_gfs_trace(sample), policies, RunSettings())
    rows = []
    for name in policies:
        m = result.policies[name].metrics
        rows.append(
            Row(
                f"simulated {name}",
                int(m["evictions"]),
                float(m["lp_queue_delay_mean_s"]),
                float(m["hp_queue_delay_mean_s"]),
                float(m["lp_gpu_hours_completed"]),
                int(m["tasks_finished"]),
                int(m["lp_tasks"] + m["hp_tasks"]),
                {
                    key.split(":", 1)[1]: float(value)
                    for key, value in m.items()
                    if key.startswith("idle_fit_gpu_hours:") and value > 0
                },
            )
        )
    return rows


def live(
    decisions: Iterable[Mapping[str, Any]],
    trace: Trace,
    *,
    prefix: str,
    speed: float,
    stopped_at: datetime,
    name: str | None = None,
) -> Row:
    """The live run's row from its decision records (task_id, kind, at, detail), for the tasks of
    `trace` named `prefix + job name` (the replay's names). On the accelerated clock the records
    are stamped in the sample's time: `speed` 1."""
    jobs = {f"{prefix}{j.name}": j for j in trace.jobs}
    events: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    evictions = 0
    for d in decisions:
        tid, kind = str(d["task_id"]), str(d["kind"])
        if tid not in jobs or kind not in ("accepted", "started", "evicted", "finished"):
            continue
        events[tid].append((d["at"], kind))
        reason = (d.get("detail") or {}).get("reason")
        if kind == "evicted" and reason == "PREEMPTED_BY_HP" and jobs[tid].job_class == "SPOT":
            evictions += 1
    waits: dict[str, list[float]] = {"SPOT": [], "HP": []}
    finished, gpu_hours = 0, 0.0
    for tid, seen in events.items():
        job = jobs[tid]
        waited, since, done = 0.0, None, False
        for at, kind in sorted(seen, key=lambda e: (e[0], _ORDER[e[1]])):
            if kind in ("accepted", "evicted"):
                since = at
            elif kind == "started" and since is not None:
                waited += (at - since).total_seconds()
                since = None
            elif kind == "finished":
                done = True
        if since is not None:  # still waiting when the run stopped
            waited += max(0.0, (stopped_at - since).total_seconds())
        waits[job.job_class].append(waited * speed)
        if done:
            finished += 1
            if job.job_class == "SPOT":
                gpu_hours += job.gpus_per_worker * job.workers * job.duration_s / 3600.0
    return Row(
        name or f"live gfs ({speed:g}x wall time)",
        evictions,
        _mean(waits["SPOT"]),
        _mean(waits["HP"]),
        gpu_hours,
        finished,
        len(events),
    )


# Same instant: an acceptance comes before a start, an eviction before the restart it allows.
_ORDER = {"accepted": 0, "evicted": 1, "started": 2, "finished": 3}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


TITLE = "Side by side on the same sample (times in the sample's hours and minutes)"
COLUMNS = ("run", "spot evictions", "spot queueing (mean)", "HP queueing (mean)", "spot GPU-h completed",
           "tasks finished")  # fmt: skip


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def cells(r: Row) -> tuple[str, ...]:
    """One row as printed, in the terminal and on the report page alike (`COLUMNS`)."""
    return (r.name, str(r.spot_evictions), minutes(r.spot_queue_mean_s), minutes(r.hp_queue_mean_s),
            f"{r.spot_gpu_hours_completed:.1f}", f"{r.finished} of {r.tasks}")  # fmt: skip


def caption(speed: float, *, accelerated: bool) -> str:
    """What the table can and cannot say: the live row is not the simulator's decision log."""
    if accelerated:
        return (
            f"The live run played the sample on an accelerated clock ({speed:g} sample seconds per "
            "wall second) and stops soon after its end, counting only what finished by then; the "
            "simulator drains every task. Live GFS forecasts with the LSTM and runs the simulator's "
            "policy code, but its clock waits for nothing: a wall second of pipeline latency is "
            f"{speed / 60:g} sample minutes, so it is not decision-for-decision equal to simulated "
            "GFS (persistence forecast) here; that equality holds when the clock waits for the "
            "pipeline to settle (`gfs parity run`, docs/parity.md)."
        )
    return (
        f"The live run stops soon after its replay (at {speed:g}x wall time) and counts only what "
        "finished by then; the simulator drains every task. Live GFS runs the simulator's policy "
        "code but decides at the instants its inputs arrive, so it is not decision-for-decision "
        "equal to simulated GFS here; that equality holds on the controllable clock "
        "(`gfs parity run`, docs/parity.md)."
    )


# Why GPUs sat idle while a queued spot task fitted, in words (the reasons of
# services/core/work_conservation.py).
_IDLE_WHY = {
    "quota:forecast": "the spot quota, sized from the forecast of HP demand, had no room left",
    "quota:eta": "the spot quota had shrunk after failed guarantee periods",
    "quota:floor": "the spot quota's floor for servable HP demand held them",
    "reservation": "they were reserved for a queued HP gang",
    "claimed": "queued HP tasks had claimed them",
    "order": "the queue's order put a task that did not fit first",
    "no-fit": "no queued spot task fitted on one node",
}


def verdict(rows: Sequence[Row]) -> str:
    """One sentence on the simulated rows: does GFS keep its promise to spot (fewer evictions and
    shorter queueing than FIFO, HP no worse) on this sample, and, where it does not, why (the idle
    GPU-hours while spot fitted, by reason). Computed from the rows, never written in advance."""
    by_name = {r.name: r for r in rows}
    gfs, fifo = by_name.get("simulated gfs"), by_name.get("simulated fifo")
    if gfs is None or fifo is None:
        return ""
    fewer = gfs.spot_evictions <= fifo.spot_evictions
    shorter = gfs.spot_queue_mean_s <= fifo.spot_queue_mean_s
    hp_ok = gfs.hp_queue_mean_s <= fifo.hp_queue_mean_s
    outcome = "keeps" if fewer and shorter and hp_ok else "does not keep"
    text = (
        f"Verdict on this sample: simulated GFS {outcome} its promise to spot against FIFO: "
        f"{gfs.spot_evictions} spot evictions against {fifo.spot_evictions}, spot queueing "
        f"{minutes(gfs.spot_queue_mean_s)} against {minutes(fifo.spot_queue_mean_s)}, HP queueing "
        f"{minutes(gfs.hp_queue_mean_s)} against {minutes(fifo.hp_queue_mean_s)}."
    )
    idle_gfs, idle_fifo = sum(gfs.idle_while_fits.values()), sum(fifo.idle_while_fits.values())
    if not shorter and idle_gfs > idle_fifo:
        reasons = sorted(gfs.idle_while_fits.items(), key=lambda kv: -kv[1])
        named = "; ".join(
            f"{hours:.1f} GPU-h because {_IDLE_WHY.get(why, why)}" for why, hours in reasons[:2]
        )
        text += (
            f" Why spot waited longer: GFS left {idle_gfs:.1f} GPU-hours idle while a queued spot task "
            f"fitted (FIFO {idle_fifo:.1f}): {named}."
        )
    if not fewer:
        text += (
            " GFS's evictions are of spot tasks it had started on GPUs an arriving HP task then "
            "needed (reason PREEMPTED_BY_HP)."
        )
    return text + (
        " One day of one sample is an anecdote: docs/evaluation.md measures the promise on 15 "
        "workload regimes with 3 seeds each, and says where GFS loses."
    )
