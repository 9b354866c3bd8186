"""Issue 22 item 10, rule (a): eta recovers without evidence (docs/decisions.md, "The spot stall").

With fewer than `min_periods` (20) outcomes in the window, the default rule judges growth on the
window padded with successes up to 20: ER_lo = failed / 20. Eps = 1 - p = 0.1, so it grows when
ER_lo <= 0.05 (grow_at x eps) by the factor 1.5 - ER_lo / 0.1, and only when the quota held a
spot task back for more than `head_wait_s` (3600 s). A sparse window never shrinks eta. Before
issue 22 (ablation gfs-no-eta-recovery, `grow_without_evidence=False`) a sparse window left eta
as it was, so at its floor with no spot task admitted it never moved again.

Every expected value is worked by hand in the row's comment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from gfs.services.core.quota import ForecastQuota, QuotaInputs, QuotaSettings, next_eta

DEFAULT = QuotaSettings()
WAIT_FOR_EVIDENCE = QuotaSettings(grow_without_evidence=False)  # the ablation: main's rule
ON_HEAD_WAIT = QuotaSettings(grow_only_when_quota_binds=False)  # gfs-grow-on-wait
LENIENT = QuotaSettings(target_eviction_rate=0.2)


def _inputs(failed: int, succeeded: int, *, held: float | None, head: float | None = None) -> QuotaInputs:
    return QuotaInputs(
        capacity=32,
        idle_gpus=32,
        spot_in_use=0.0,
        hp_quantile=np.zeros(4),
        eta=0.1,
        failed_recent=failed,
        succeeded_recent=succeeded,
        head_wait_s=head if head is not None else held,
        quota_held_wait_s=held,
    )


@dataclass(frozen=True)
class Row:
    id: str
    eta: float
    failed: int
    succeeded: int
    held: float | None  # how long the quota held a spot task back (None: it held none)
    settings: QuotaSettings
    expected: float
    head: float | None = None  # the spot head's wait, if not `held`


ROWS = [
    # The stall: eta at its floor, an empty window, spot held by the quota for 4000 s > 3600 s.
    # ER_lo = 0 / 20 = 0 -> factor 1.5 - 0 = 1.5 -> 0.1 x 1.5 = 0.15.
    Row("floor-empty-window-grows", 0.1, 0, 0, 4000.0, DEFAULT, 0.15),
    # Main's rule: fewer than 20 outcomes -> unchanged, for ever (nothing can be logged).
    Row("floor-empty-window-ablation-stalls", 0.1, 0, 0, 4000.0, WAIT_FOR_EVIDENCE, 0.1),
    # Five successes, no failure: ER_lo = 0 -> x 1.5: 0.4 -> 0.6.
    Row("few-successes-grow", 0.4, 0, 5, 4000.0, DEFAULT, 0.6),
    # One failure of five: ER_lo = 1/20 = 0.05, at the growth bound 0.5 x eps (just above it in
    # floating point, eps = 1 - 0.9; at equality the factor 1.5 - 0.5 = 1 changes nothing either):
    # 0.4 unchanged. Ignoring the failure would give 0.6.
    Row("one-failure-no-growth", 0.4, 1, 4, 4000.0, DEFAULT, 0.4),
    # A lenient target eps = 0.2 (growth bound 0.1): one failure of five, ER_lo = 1/20 = 0.05 ->
    # factor 1.5 - 0.05 / 0.2 = 1.25: 0.4 -> 0.5. (The five alone, ER 0.2 > 0.1: no growth; the
    # failure ignored: x 1.5 = 0.6; the sign flipped: x 1.75 = 0.7.)
    Row("padded-failure-slows-growth", 0.4, 1, 4, 4000.0, LENIENT, 0.5),
    # Three failures, no success: ER_lo = 0.15 >= 1.5 eps, yet a sparse window never shrinks: 0.5.
    Row("sparse-never-shrinks", 0.5, 3, 0, 4000.0, DEFAULT, 0.5),
    # Held 3000 s <= 3600 s: no growth.
    Row("short-hold-no-growth", 0.1, 0, 0, 3000.0, DEFAULT, 0.1),
    # The head waited 4000 s but placement held it, not the quota (held None): no growth.
    Row("placement-held-no-growth", 0.1, 0, 0, None, DEFAULT, 0.1, head=4000.0),
    # ... unless growth follows the head's wait (gfs-grow-on-wait): 0.1 x 1.5.
    Row("placement-held-grow-on-wait", 0.1, 0, 0, None, ON_HEAD_WAIT, 0.15, head=4000.0),
    # 0.8 x 1.5 = 1.2, clamped to eta_max 1.
    Row("growth-clamped", 0.8, 0, 0, 4000.0, DEFAULT, 1.0),
    # Continuity at min_periods: 19 successes (sparse, ER_lo 0) and 20 (full, ER 0) both x 1.5.
    Row("nineteen-successes", 0.2, 0, 19, 4000.0, DEFAULT, 0.3),
    Row("twenty-successes", 0.2, 0, 20, 4000.0, DEFAULT, 0.3),
    # 1 failure + 18 successes (sparse: ER_lo = 1/20) and + 19 (full: ER = 1/20): factor 1 in both.
    Row("nineteen-with-a-failure", 0.2, 1, 18, 4000.0, DEFAULT, 0.2),
    Row("twenty-with-a-failure", 0.2, 1, 19, 4000.0, DEFAULT, 0.2),
    # A full window is judged as before: ER 4/20 = 0.2 >= 0.15 -> x 0.1 / 0.2: 0.6 -> 0.3.
    Row("full-window-shrinks", 0.6, 4, 16, 4000.0, DEFAULT, 0.3),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_eta_recovers_without_evidence(row: Row) -> None:
    inputs = _inputs(row.failed, row.succeeded, held=row.held, head=row.head)
    assert next_eta(row.eta, inputs, row.settings) == pytest.approx(row.expected)


def test_the_floor_quota_rises_above_a_four_gpu_task() -> None:
    # The pool: 32 GPUs idle, no HP forecast, eta 0.1 -> Q = 3.2 < 4: a 4-GPU spot task
    # never fits. The next refresh grows eta to 0.15 -> Q(1) = 0.15 x 32 = 4.8 >= 4.
    inputs = _inputs(0, 0, held=4000.0)
    assert ForecastQuota().refresh(inputs).quota[1] == pytest.approx(4.8)
    assert ForecastQuota(settings=WAIT_FOR_EVIDENCE).refresh(inputs).quota[1] == pytest.approx(3.2)
