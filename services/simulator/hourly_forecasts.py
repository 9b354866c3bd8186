"""The simulation's forecasts of HP demand, one per hour: the forecaster refitted once a day and
asked at the first quota refresh of each hour, on the completed hours of the demand series."""

from __future__ import annotations

from gfs.services.core.forecast import DemandForecast, Forecaster
from gfs.services.simulator.demand_tracking import DemandTracking
from gfs.services.simulator.engine_state import HORIZON_H, DemandInput
from gfs.services.simulator.recording import Recorder


class HourlyForecasts:
    """Owns the forecast of the current hour (cached) and the day of the last refit."""

    def __init__(self, forecaster: Forecaster, demand: DemandInput) -> None:
        self.forecaster = forecaster
        self.demand = demand
        self.cache: tuple[int, DemandForecast | None] = (-1, None)
        self.last_fit_day = -1

    def at(self, now: float, tracking: DemandTracking, recorder: Recorder) -> DemandForecast | None:
        hour = int(now // 3600)
        if self.cache[0] == hour:
            return self.cache[1]
        day = int(now // 86400)
        tracking.advance(now)  # the hours before this one are final now
        keys, hourly = self.demand.keys, self.demand.hourly
        if day != self.last_fit_day:
            self.last_fit_day = day
            self.forecaster.fit(keys, hourly, hour)
        fc = self.forecaster.predict(keys, hourly, hour, HORIZON_H)
        self.cache = (hour, fc)
        recorder.forecasts += 1
        if fc.fallback:
            recorder.forecast_fallbacks += 1
        return fc
