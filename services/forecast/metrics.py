"""The forecast worker's metric families (served on Faust's web server, `/metrics`).

All four are counts since the process started, so they are counters (exported with `_total`);
every family has a description (`promtool check metrics` warns without one;
tests/static/test_metrics_exposition.py renders them and runs it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Meter, Observation

if TYPE_CHECKING:
    from gfs.services.forecast.forecasting import StreamForecaster

Callback = Callable[[CallbackOptions], list[Observation]]

# counters key -> help text; exported as gfs_forecast_<key>_total.
COUNTS = {
    "dead_lettered": "records sent to the dead-letter topic",
    "skipped": "decodable events the stream could not use",
    "forecasts": "hourly forecast rounds published (per pool)",
}


def register_metrics(meter: Meter, counters: Mapping[str, int], forecaster: StreamForecaster) -> None:
    """Create the worker's instruments on `meter`, read from `counters` (the stream's own counts,
    keys of COUNTS) and the forecaster at each scrape."""
    for key, help_text in COUNTS.items():
        meter.create_observable_counter(
            f"gfs_forecast_{key}", callbacks=[_counter_callback(counters, key)], description=help_text
        )
    meter.create_observable_counter(
        "gfs_forecast_fallbacks",
        callbacks=[lambda _: [Observation(forecaster.fallbacks)]],
        description="forecasts answered by persistence because the model failed",
    )


def _counter_callback(counters: Mapping[str, int], key: str) -> Callback:
    def observe(_: CallbackOptions) -> list[Observation]:
        return [Observation(counters[key])]

    return observe
