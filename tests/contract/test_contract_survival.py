"""The survival quote on the wire (issue 27 item 1): TaskAccepted.survival and SpotQuota.hp_demand
are optional, so messages written before them still decode; what is there is checked; the
client's `survival_of` (services/producers/task_state.py) reads it off a TaskAccepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gfs.schemas.envelope import wrap
from gfs.schemas.quota import HpDemandHour
from gfs.schemas.tasks import SurvivalQuote, TaskAccepted, TaskClass
from gfs.schemas.topics import QUOTAS_TOPIC, TASK_LIFECYCLE_TOPIC, decode, encode
from gfs.services.producers.task_state import survival_of

GOLDEN = Path(__file__).parent / "golden" / "v1"
QUOTE = {"guarantee_hours": 2, "guarantee": 0.5, "hours_1": 0.691, "hours_2": 0.5, "hours_4": 0.159}


def _accepted_bytes(payload: dict[str, object]) -> bytes:
    env = json.loads((GOLDEN / "TaskAccepted.json").read_text())
    env["payload"] = payload
    return json.dumps(env).encode()


def test_a_task_accepted_from_before_the_quote_decodes_without_one() -> None:
    env = decode(TASK_LIFECYCLE_TOPIC, (GOLDEN / "TaskAccepted.json").read_bytes())
    assert env.payload.survival is None
    assert survival_of(env) is None


def test_a_quoted_task_accepted_round_trips_and_the_client_reads_it() -> None:
    raw = _accepted_bytes({"task_id": "job-1", "pool": "A100", "task_class": "SPOT", "survival": QUOTE})
    env = decode(TASK_LIFECYCLE_TOPIC, raw)
    assert env.payload.survival == SurvivalQuote(**QUOTE)  # type: ignore[arg-type]
    assert decode(TASK_LIFECYCLE_TOPIC, encode(env)) == env
    assert survival_of(env) == SurvivalQuote(**QUOTE)  # type: ignore[arg-type]
    hp = wrap(TaskAccepted(task_id="job-2", pool="A100", task_class=TaskClass.HP), producer="t")
    assert survival_of(hp) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("guarantee", 1.5), ("hours_1", -0.1), ("hours_4", float("nan")), ("guarantee_hours", 3)],
)
def test_a_quote_outside_its_range_is_refused(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as info:
        SurvivalQuote(**{**QUOTE, field: value})  # type: ignore[arg-type]
    assert info.value.errors()[0]["loc"] == (field,)


def test_a_quote_missing_a_duration_is_refused() -> None:
    partial = {k: v for k, v in QUOTE.items() if k != "hours_4"}
    with pytest.raises(ValidationError, match="hours_4"):
        TaskAccepted(task_id="job-1", pool="A100", task_class=TaskClass.SPOT, survival=partial)  # type: ignore[arg-type]


def test_a_spot_quota_from_before_the_forecast_field_decodes_without_it() -> None:
    env = decode(QUOTAS_TOPIC, (GOLDEN / "SpotQuota.json").read_bytes())
    assert env.payload.hp_demand is None


def test_a_spot_quota_carries_its_forecast() -> None:
    env = json.loads((GOLDEN / "SpotQuota.json").read_text())
    env["payload"]["hp_demand"] = [{"mean": 2900.0, "std": 40.0}, {"mean": 2950.0, "std": 50.0}]
    decoded = decode(QUOTAS_TOPIC, json.dumps(env).encode())
    assert decoded.payload.hp_demand == (
        HpDemandHour(mean=2900.0, std=40.0),
        HpDemandHour(mean=2950.0, std=50.0),
    )
    env["payload"]["hp_demand"] = [{"mean": 2900.0, "std": -1.0}]
    with pytest.raises(ValidationError):
        decode(QUOTAS_TOPIC, json.dumps(env).encode())
