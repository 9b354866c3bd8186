"""Issue 22 item 10, rule (c): a spot task the quota cannot admit blocks only its own bucket.

GFS's spot buckets are (gpus per worker, guarantee hours), each ordered by workers, then submit
time (spec 5.3, docs/decisions.md #18). Every task behind an over-quota head in its bucket asks for
at least as many GPUs (same g, at least as many workers) against the same Q(H), and spot in use
only grows during a pass, so none of them can be admitted: stopping the bucket loses nothing.
Other buckets go on, and the miss does not raise the `failed` threshold (spec 5.3: skip without
raising), so a bucket of the same size but another guarantee duration is tried too.

FIFO-order baselines keep one bucket: a head the quota refuses blocks everything behind it. That
is their definition (spec 6.2, head-of-line blocking), not this rule's concern; the last row pins
it so the rule is not applied to them by mistake.

Pool: 4 nodes of 8 GPUs, all idle; quotas per guarantee hours as in each row; expected starts
worked by hand in the comments.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from builders import a_pool, a_spot

from gfs.services.core.cycle import CycleContext, schedule_pool
from gfs.services.core.decisions import StartTask
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.queues import BucketQueue
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.task import TaskSpec
from gfs.services.core.victims import PreemptionContext

# The shape: a 4-GPU head over the floor quota 3.2, smaller spot behind it in time.
BIG = a_spot("big", gpus=4, submit=0.0)
BIG_2W = a_spot("big-2w", gpus=4, workers=2, submit=1.0)  # behind big in its bucket
SMALL = tuple(a_spot(f"one-{i}", gpus=1, submit=10.0 + i) for i in range(4))
BIG_H2 = a_spot("big-h2", gpus=4, submit=20.0, guarantee_hours=2)


@dataclass(frozen=True)
class Row:
    id: str
    policy: str
    spot: tuple[TaskSpec, ...]
    quota: dict[int, float]
    started: tuple[str, ...]
    over_quota_heads: tuple[str, ...]  # heads of buckets the pass left blocked by the quota


ROWS = [
    # Q(1) = 3.2. Bucket (4 GPUs, 1 h): big 4 > 3.2 -> over quota; big-2w (8) is never tried.
    # Bucket (1 GPU, 1 h): one-0..2 start (1, 2, 3 <= 3.2), one-3 (4 > 3.2) over quota.
    Row("smaller-buckets-go-on", "gfs", (BIG, BIG_2W, *SMALL), {1: 3.2, 2: 3.2, 4: 3.2},
        ("one-0", "one-1", "one-2"), ("big", "one-3")),
    # Q(1) = 3.2, Q(2) = 8: big (1 h) over quota; big-h2 (4 <= 8) in the (4 GPUs, 2 h) bucket starts,
    # although it is as large as big: the miss raised no threshold. Spot in use is then 4, so
    # one-0 (bucket 1 GPU, 1 h) needs 4 + 1 = 5 > Q(1) = 3.2: over quota.
    Row("same-size-other-guarantee-goes-on", "gfs", (BIG, BIG_H2, *SMALL), {1: 3.2, 2: 8.0, 4: 8.0},
        ("big-h2",), ("big", "one-0")),
    # FIFO (one bucket, arrival order): big is over Q = 3.2 and blocks every task behind it.
    Row("fifo-head-of-line-is-its-definition", "fifo", (BIG, *SMALL), {1: 3.2, 2: 3.2, 4: 3.2},
        (), ("big",)),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_an_over_quota_head_blocks_only_its_bucket(row: Row) -> None:
    policy = build_policy(row.policy)
    pool = a_pool(8, 8, 8, 8)
    hp, spot = BucketQueue(policy.hp_order), BucketQueue(policy.spot_order)
    for spec in row.spot:
        spot.push(spec, spec.submit_s)
    ctx = CycleContext(
        now=100.0,
        preemption_enabled=True,
        quota_enabled=True,
        quota=row.quota,
        preemption=PreemptionContext(now=100.0, failed_periods=0, succeeded_periods=0, t_win_s=2678400.0),
        version=0,
    )
    outcome = schedule_pool(pool, hp, spot, policy, ctx)
    assert tuple(d.task_id for d in outcome.decisions if isinstance(d, StartTask)) == row.started
    held = tuple(m.head for _, _, m in outcome.blocked if m.reason is Unschedulable.OVER_QUOTA)
    assert held == row.over_quota_heads
    assert all(not m.raises_threshold for _, _, m in outcome.blocked if m.reason is Unschedulable.OVER_QUOTA)
