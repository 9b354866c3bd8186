"""The lines `gfs livebench races` (services/livebench/races/bench.py) prints: the checks' findings, the
races that really happened and the run's numbers."""

from __future__ import annotations

import statistics
from typing import Any

from gfs.services.livebench.races.check import RaceReport


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def render(report: RaceReport, numbers: dict[str, Any]) -> list[str]:
    plan = numbers["plan"]
    unfinished = numbers.get("unfinished_state", {})
    lost = sorted(t for t, s in unfinished.items() if s not in ("running", "queued"))
    d = report.ack_delays_ms
    r = report
    lines = [
        f"races run {numbers['run']}: {plan['tasks']:,} tasks, {plan['nodes']} nodes x {plan['gpus']} GPUs, "
        f"offered {numbers.get('offered_rate', 0)}/s (target {plan['rate']}/s, "
        f"backlog cap {plan['max_backlog']}), "
        f"acks delayed up to {plan['ack_delay_max_s']} s, grace {plan['grace_s']} s, seed {plan['seed']}; "
        f"wall {numbers['wall_s']:.0f} s",
        f"  tasks: accepted {report.accepted:,}, finished {report.finished:,}, rejected {report.rejected}, "
        f"unfinished {len(report.unfinished)} (held by the service: {len(report.unfinished) - len(lost)}, "
        f"LOST: {len(lost)}), never answered {len(numbers.get('never_answered', []))}",
        f"  commands: {r.binds:,} binds ({r.binds_reissued} re-issued), {r.evictions:,} evictions "
        f"{dict(r.evictions_by_reason)}; {r.task_evicted:,} TaskEvicted; workers run {r.workers_run:,}",
        f"  GPUs bound twice: on the nodes {len(report.double_bound_on_node)}, "
        f"in the commands {len(report.double_bound_in_commands)}; "
        f"two runs of one task at once {len(report.two_runs_at_once)}",
        f"  false evictions {len(report.false_evictions)} (genuine {report.genuine_evictions:,}, of which "
        f"{r.evicted_before_start} before the worker started, {r.gang_nodes_ended_on_their_own} "
        f"for a gang's node whose worker had ended on its own; unverifiable {len(r.unverified_evictions)}); "
        f"evicted twice {len(report.evicted_twice)}; finished twice {len(report.finished_twice)}; "
        f"false FAILED periods {len(report.false_failed_periods)}",
        f"  races: {report.evictions_raced_by_exit:,} evictions raced by an exit on its own "
        f"({report.exits_before_eviction_issued:,} exited before the eviction was issued, "
        f"{report.exits_while_eviction_in_flight:,} while it was on its way); {report.not_running_acks:,} "
        f"NOT_RUNNING acks; {report.evict_read_before_bind} evictions read before their bind",
        f"  ack delay (record time - occurred_at), ms: n={len(d):,} p50 {_pct(d, 0.5):.0f} "
        f"p90 {_pct(d, 0.9):.0f} p99 {_pct(d, 0.99):.0f} max {max(d, default=float('nan')):.0f}; "
        f"mean {statistics.fmean(d) if d else float('nan'):.0f}",
        f"  CPU s: {numbers.get('cpu_s')}",
    ]
    for name, found in (("double bound on a node", report.double_bound_on_node),
                        ("double bound in the commands", report.double_bound_in_commands),
                        ("two runs at once", report.two_runs_at_once),
                        ("false eviction", report.false_evictions), ("evicted twice", report.evicted_twice),
                        ("false FAILED period", report.false_failed_periods), ("lost", lost)):  # fmt: skip
        lines += [f"  {name}: {x}" for x in found[:10]]
    return lines
