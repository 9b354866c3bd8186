"""Issue 22 item 10, rule (b): which stops are failed guarantee periods in the core's ledger (the
input of eta's feedback and of the node cost F_v, spec 4.1, 5.2).

Failures: an eviction to make room for an HP task (spec 4.2, 5.4) and a lease not renewed inside
a period (the lease baseline, spec 8 #7). Not failures (the interrupted period is void, completed
periods are successes): a node going down, a cancel; a finish is successes whatever the worker's
exit code (the core sees no exit codes; the live service finishes non-zero exits the same way);
an eviction that met a run which had already ended on its own (`stop_was_finish`, the live
service learns it from the acks: docs/attempts.md): its failure is withdrawn and the period it cut
short is a success, as a finish's last period is.

World (as test_core_runtime's): two 2-GPU nodes; spot A (2 GPUs) on n0 since 0, spot B (2 GPUs)
on n1 since 1000. Every stop is at t = 5000: A has run 5000 s (1 full period + 1400 s), B 4000 s
(1 full period + 400 s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from builders import a_pool, a_spot, a_task

from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Stopped

T = 5000.0


def _world(policy: str = "gfs") -> PoolRuntime:
    rt = PoolRuntime(
        a_pool(2, 2), build_policy(policy), RuntimeSettings(t_win_s=31 * 86400.0, cost_weight=5.0)
    )
    assert rt.submit(a_spot("A", gpus=2, submit=0.0), 0.0) is None
    assert [o.task_id for o in rt.schedule(0.0).outcomes] == ["A"]
    assert rt.submit(a_spot("B", gpus=2, submit=1000.0), 1000.0) is None
    assert [o.task_id for o in rt.schedule(1000.0).outcomes] == ["B"]
    return rt


def _evicted_for_hp(rt: PoolRuntime) -> None:
    # H (2 GPUs): both nodes hold 2 preemptible GPUs; B lost less work (2 x 4000 < 2 x 5000 GPU-s).
    assert rt.submit(a_task("H", gpus=2, submit=T), T) is None
    stops = [o for o in rt.schedule(T).outcomes if isinstance(o, Stopped)]
    assert [s.task_id for s in stops] == ["B"]


def _evicted_after_it_exited(rt: PoolRuntime) -> None:
    _evicted_for_hp(rt)
    # The acks said B had already finished: its failure is withdrawn, its cut period a success.
    assert rt.stop_was_finish(T, cut_short=True)


def _lease_not_renewed(rt: PoolRuntime) -> None:
    # Chronus: every lease is released; an HP gang of 2 x 2 GPUs takes both nodes first, so neither
    # A nor B is renewed: both stop inside a period.
    rt.release_leases(T)
    assert rt.submit(a_task("G", gpus=2, workers=2, submit=T), T) is None
    rt.schedule(T)


@dataclass(frozen=True)
class Row:
    id: str
    stop: Callable[[PoolRuntime], object]
    failed: int
    succeeded: int
    policy: str = "gfs"


ROWS = [
    # B: floor(4000 / 3600) = 1 success, the interrupted period 1 failure.
    Row("evicted-for-hp", _evicted_for_hp, 1, 1),
    # As above, then found finished: no failure, 2 successes (as the finish below).
    Row("evicted-after-it-exited", _evicted_after_it_exited, 0, 2),
    # B's completed period counts, the interrupted one is void.
    Row("node-down", lambda rt: rt.node_down(1, T), 0, 1),
    Row("cancelled", lambda rt: rt.cancel(TaskId("B"), T), 0, 1),
    # A finish: ceil(4000 / 3600) = 2 successes, whatever the exit code.
    Row("finished", lambda rt: rt.finish(TaskId("B"), T), 0, 2),
    # A: 1 success + 1 failure; B: 1 success + 1 failure.
    Row("lease-not-renewed", _lease_not_renewed, 2, 2, policy="chronus"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_only_evictions_fail_a_period(row: Row) -> None:
    rt = _world(row.policy)
    row.stop(rt)
    assert (rt.ledger.failed_total, rt.ledger.succeeded_total) == (row.failed, row.succeeded)
    assert rt.ledger.recent(T) == (row.failed, row.succeeded)  # what eta's feedback reads


def test_a_stop_that_was_a_finish_withdraws_only_a_failure_logged_at_that_time() -> None:
    rt = _world()
    _evicted_for_hp(rt)
    assert not rt.stop_was_finish(T - 1.0, cut_short=False)  # nothing was logged at 4999
    assert rt.ledger.failed_total == 1
    assert not rt.stop_was_finish(None, cut_short=False)  # a stop that logged no failure
    assert rt.ledger.failed_total == 1
    assert rt.stop_was_finish(T, cut_short=False)
    assert not rt.stop_was_finish(T, cut_short=False)  # once only
    assert (rt.ledger.failed_total, rt.ledger.succeeded_total) == (0, 1)
