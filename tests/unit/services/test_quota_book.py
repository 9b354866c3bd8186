"""The quota service's pool book, worked by hand on one pool (capacity 100 GPUs)."""

from __future__ import annotations

from typing import get_args

import pytest

from gfs.schemas.fields import GuaranteeHours
from gfs.services.core.guarantee import OFFERED_GUARANTEE_HOURS
from gfs.services.core.quota import QuotaSettings
from gfs.services.quota.book import ForecastView, PoolBook, StatusView

T0 = 1_700_000_000.0  # any instant; the book reads no clock
H = 3600.0


def _status(at: float = T0, **kw: float | None) -> StatusView:
    values: dict[str, float | None] = {
        "capacity": 100, "idle_gpus": 30, "spot_in_use": 10.0, "hp_running": 50.0, "hp_queued": 5.0,
        "head_wait_s": None, "quota_held_wait_s": None,
    }  # fmt: skip
    values.update(kw)
    return StatusView(observed_s=at, **values)  # type: ignore[arg-type]


def _forecast(origin: float, q90: list[float], version: str = "lstm-1") -> ForecastView:
    n = len(q90)
    return ForecastView(
        origin_s=origin,
        mean=tuple(q - 5.0 for q in q90),
        std=(4.0,) * n,
        quantiles=tuple({"0.5": q - 5.0, "0.9": q} for q in q90),
        version=version,
        fallback=False,
    )


def test_wire_and_core_offer_the_same_guarantee_durations() -> None:
    assert tuple(get_args(GuaranteeHours)) == OFFERED_GUARANTEE_HOURS


def test_quota_from_forecast_and_the_running_plus_queued_floor() -> None:
    # q90 [40.5, 60, 10, 10]; HP running 50 + queued 5 = 55 floors it: usage [55, 60, 55, 55],
    # spare [45, 40, 45, 45]; eta 1 (no outcomes yet): Q(1) = 45, Q(2) = min(45, 40) = 40,
    # Q(4) = 40. Published for the offered durations 1, 2 and 4 only.
    book = PoolBook("A100")
    book.update_status(_status())
    book.update_forecast(_forecast(T0, [40.5, 60.0, 10.0, 10.0]))
    out = book.compute(T0 + 60, refresh_s=300)
    assert out is not None
    assert dict(out.quota) == {1: 45.0, 2: 40.0, 4: 40.0}
    assert (out.eta, out.capacity, out.valid_until_s) == (1.0, 100, T0 + 60 + 600)
    assert out.forecast_version == f"lstm-1@{T0:.0f}"


def test_an_hour_old_forecast_drops_the_hour_that_is_over() -> None:
    # Origin 1.5 h ago: hour 1 is over, so [60, 10, 10] remain: usage [60, 55, 55] -> spare
    # [40, 45, 45]: Q(1) = 40, Q(2) = 40, Q(4) = 40 (only 3 hours left: the min over them).
    book = PoolBook("A100")
    book.update_status(_status())
    book.update_forecast(_forecast(T0 - 1.5 * H, [40.5, 60.0, 10.0, 10.0]))
    out = book.compute(T0, refresh_s=300)
    assert out is not None and dict(out.quota) == {1: 40.0, 2: 40.0, 4: 40.0}


def test_a_stale_or_missing_forecast_falls_back_to_idle_capacity() -> None:
    # Older than 2 h: not used; the quota is what spot holds plus what is idle, 10 + 30 = 40.
    book = PoolBook("A100")
    book.update_status(_status())
    book.update_forecast(_forecast(T0 - 3 * H, [0.0] * 4))
    out = book.compute(T0, refresh_s=300)
    assert out is not None and out.forecast is None
    assert dict(out.quota) == {1: 40.0, 2: 40.0, 4: 40.0}
    assert PoolBook("none").compute(T0, refresh_s=300) is None  # no status yet: nothing to size


def test_outcomes_out_of_order_redelivered_and_outside_the_window() -> None:
    # 14 successes and 6 failures ended within the last 4 h -> ER 0.3 >= 1.5 x 0.1: eta shrinks
    # to 1 x 0.1 / 0.3 = 1/3, so Q(1) = 45 / 3 = 15. A redelivered failure changes nothing; one
    # that ended 5 h ago is outside the window.
    book = PoolBook("A100")
    book.update_status(_status())
    book.update_forecast(_forecast(T0, [40.5, 60.0, 10.0, 10.0]))
    ends = [T0 - k * 600.0 for k in range(20)][::-1]  # fed newest-last, then shuffled below
    for i in (5, 2, 19, 0, 11, 7, 3, 15, 8, 1, 13, 17, 4, 10, 18, 6, 12, 9, 16, 14):
        assert book.record_outcome(f"t{i}", ends[i] - H, ends[i], succeeded=i >= 6)
    assert not book.record_outcome("t0", ends[0] - H, ends[0], succeeded=False)  # redelivered
    assert book.record_outcome("old", T0 - 6 * H, T0 - 5 * H, succeeded=False)
    out = book.compute(T0, refresh_s=300)
    assert out is not None
    assert (out.failed_recent, out.succeeded_recent) == (6, 14)
    assert out.eta == pytest.approx(1 / 3)
    assert out.quota[1] == pytest.approx(15.0)
    assert book.eta == 1.0  # not persisted yet
    book.commit(out)
    assert (book.eta, book.version) == (pytest.approx(1 / 3), 1)


def test_an_older_status_or_forecast_never_replaces_a_newer_one() -> None:
    book = PoolBook("A100")
    assert book.update_status(_status(T0))
    assert not book.update_status(_status(T0 - 300, capacity=7))
    assert book.update_forecast(_forecast(T0, [1.0]))
    assert not book.update_forecast(_forecast(T0 - H, [2.0]))
    assert book.status is not None and book.status.capacity == 100


def test_a_level_the_forecast_lacks_comes_from_its_gaussian() -> None:
    # p = 0.95 is not carried: mean + z(0.95) x std = 35.5 + 1.6449 x 4 = 42.08 for hour 1.
    view = _forecast(T0, [40.5])
    assert view.quantile(0.95, T0)[0] == pytest.approx(35.5 + 1.6448536 * 4.0, abs=1e-4)


def test_forecast_health_counts_hours_whose_demand_stayed_under_the_quantile() -> None:
    # q90 for the current hour is 40.5. Statuses: HP running + queued 30, 40, 50 (one over),
    # then one 25 h later (the first three fall out of the day's window).
    book = PoolBook("A100")
    book.update_forecast(_forecast(T0, [40.5, 60.0, 10.0, 10.0]))
    for k, (running, queued) in enumerate(((25.0, 5.0), (35.0, 5.0), (45.0, 5.0))):
        assert book.update_status(_status(T0 + 60 * (k + 1), hp_running=running, hp_queued=queued))
    assert book.forecast_health(T0 + 600) == (3, pytest.approx(2 / 3))
    assert not book.update_status(_status(T0 + 60, hp_running=99.0))  # older: ignored, not sampled
    assert book.forecast_health(T0 + 25 * H) == (0, None)


@pytest.mark.parametrize(
    ("failures", "recovery", "expected_eta"),
    [
        # Issue 22 (the spot stall): no outcome in the window, eta at its floor, the quota held the
        # spot head for 4000 s > 3600 s: ER_lo = 0 / 20 -> eta x 1.5 = 0.15.
        (0, True, 0.15),
        # One failure in the window: ER_lo = 1 / 20 = 0.05 -> factor 1.5 - 0.5 = 1: unchanged.
        (1, True, 0.1),
        # The rule switched off (gfs-no-eta-recovery): fewer than 20 outcomes, eta waits for ever.
        (0, False, 0.1),
    ],
)
def test_eta_recovers_in_the_live_quota_without_evidence(
    failures: int, recovery: bool, expected_eta: float
) -> None:
    book = PoolBook("A100", settings=QuotaSettings(grow_without_evidence=recovery), eta=0.1)
    book.update_status(_status(quota_held_wait_s=4000.0))
    for i in range(failures):
        book.record_outcome(f"t{i}", T0 - 600.0, T0 - 60.0, succeeded=False)
    computed = book.compute(T0, 300.0)
    assert computed is not None and computed.eta == pytest.approx(expected_eta)
