"""The quota service's metric families (served on the SRE API's `/metrics`).

Named by the Prometheus and OpenTelemetry rules (docs/operations.md, "Metrics and alerts"): a
cumulative count is a counter (exported with `_total`), a unit is in the name (`_seconds`, and
`_ratio` for a share or a dimensionless factor), every family has a description (`promtool check
metrics` warns without one; tests/static/test_metrics_exposition.py runs it). The targets the
alerts compare against (forecast coverage p, eviction rate eps) are exported next to the measured
values, so a rule needs no constant that a setting could move.
"""

from __future__ import annotations

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from gfs.services.quota.view import QuotaView


def register_metrics(meter: Meter, service: QuotaView) -> None:
    """Create the service's instruments on `meter`, each read from its live state at a scrape."""

    def quota(_: CallbackOptions) -> list[Observation]:
        return [
            Observation(q, {"pool": c.pool, "guarantee_hours": str(h)})
            for c in service.latest.values()
            for h, q in c.quota.items()
        ]

    def capacity(_: CallbackOptions) -> list[Observation]:
        return [Observation(c.capacity, {"pool": c.pool}) for c in service.latest.values()]

    def forecast_hp(_: CallbackOptions) -> list[Observation]:
        # The p-quantile of HP demand per hour ahead that the quota was sized on (none without a
        # forecast: the idle-capacity fallback).
        return [
            Observation(float(q), {"pool": c.pool, "hours_ahead": str(h)})
            for c in service.latest.values()
            if c.inputs.hp_quantile is not None
            for h, q in enumerate(c.inputs.hp_quantile, start=1)
        ]

    def eta(_: CallbackOptions) -> list[Observation]:
        return [Observation(c.eta, {"pool": c.pool}) for c in service.latest.values()]

    def eviction_rate(_: CallbackOptions) -> list[Observation]:
        # None until a guarantee period ended inside the feedback window: no series then.
        return [
            Observation(c.eviction_rate, {"pool": c.pool})
            for c in service.latest.values()
            if c.eviction_rate is not None
        ]

    def eviction_target(_: CallbackOptions) -> list[Observation]:
        return [Observation(b.settings.target, {"pool": name}) for name, b in service.books.items()]

    def forecast_age(_: CallbackOptions) -> list[Observation]:
        return [
            Observation(c.computed_s - c.forecast.origin_s, {"pool": c.pool})
            for c in service.latest.values()
            if c.forecast is not None
        ]

    def coverage(_: CallbackOptions) -> list[Observation]:
        now = service.clock.now()
        out = []
        for name, book in service.books.items():
            share = book.forecast_health(now)[1]
            if share is not None:
                out.append(Observation(share, {"pool": name}))
        return out

    def coverage_target(_: CallbackOptions) -> list[Observation]:
        return [Observation(b.settings.guarantee_rate, {"pool": name}) for name, b in service.books.items()]

    def fallbacks(_: CallbackOptions) -> list[Observation]:
        return [Observation(service.fallback_forecasts)]

    def dead_letters(_: CallbackOptions) -> list[Observation]:
        return [Observation(service.stats.dead_lettered)]

    def lag(_: CallbackOptions) -> list[Observation]:
        probe = service.lag_probe
        if probe is None:
            return []
        return [Observation(v, {"group": probe.group, "topic": t}) for t, v in sorted(probe.lag.items())]

    # (name, unit, description, callback, cumulative?). Unit "1" (dimensionless): the name carries
    # `_ratio`, as the Prometheus rules ask; "{message}" is an annotation, not a unit: no suffix.
    families = (
        ("gfs_quota_gpus", "", "Spot quota per pool and guarantee duration, in GPUs", quota, False),
        ("gfs_quota_capacity_gpus", "", "The pool's GPU capacity in its last status", capacity, False),
        ("gfs_quota_forecast_hp_gpus", "",
         "Forecast p-quantile of the pool's HP demand per hour ahead, behind the last quota",
         forecast_hp, False),
        ("gfs_quota_eta_ratio", "1", "The eviction feedback's factor eta on the spare capacity", eta, False),
        ("gfs_quota_eviction_rate_ratio", "1",
         "Share of the guarantee periods ended in the feedback window that were evicted",
         eviction_rate, False),
        ("gfs_quota_eviction_target_ratio", "1",
         "The eviction rate eps the feedback steers to (1 - p unless set)", eviction_target, False),
        ("gfs_quota_forecast_age_seconds", "s",
         "Age of the forecast behind the pool's last quota, at its computation", forecast_age, False),
        ("gfs_forecast_coverage_ratio", "1",
         "Share of the last day's status samples whose realised HP demand stayed at or below the "
         "forecast p-quantile (calibrated: about p)", coverage, False),
        ("gfs_forecast_coverage_target_ratio", "1",
         "The quantile level p the forecast coverage should match (the guarantee rate)",
         coverage_target, False),
        ("gfs_quota_forecast_fallbacks", "",
         "Forecasts received that were the forecast stream's fallback (persistence)", fallbacks, True),
        ("gfs_quota_dead_letters", "",
         "Records the quota service sent to the dead-letter topic", dead_letters, True),
        ("gfs_consumer_lag", "{message}",
         "The quota service's consumer lag: end offset minus committed offset, per topic", lag, False),
    )  # fmt: skip
    for name, unit, description, callback, cumulative in families:
        # A count since the process started is a counter (exported with _total): rate() and
        # increase() then read a restart as a reset, not as a drop.
        create = meter.create_observable_counter if cumulative else meter.create_observable_gauge
        create(name, callbacks=[callback], unit=unit, description=description)
