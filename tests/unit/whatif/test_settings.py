"""`--set KEY=VALUE` as the quota's settings (services/whatif/replay.py)."""

from __future__ import annotations

import pytest

from gfs.services.core.quota import QuotaSettings
from gfs.services.whatif.replay import quota_settings


def test_set_names_the_quota_settings_with_the_papers_short_names() -> None:
    assert quota_settings([]) is None
    got = quota_settings(["p=0.95", "min_periods=5", "observed_floor=false", "demand_source=trace"])
    assert got == QuotaSettings(
        guarantee_rate=0.95, min_periods=5, observed_floor=False, demand_source="trace"
    )
    assert quota_settings(["eps=0.2"]) == QuotaSettings(target_eviction_rate=0.2)


def test_a_bad_setting_is_refused_naming_what_is_known() -> None:
    with pytest.raises(ValueError, match=r"KEY one of p, eps, .*guarantee_rate"):
        quota_settings(["q=0.9"])
    with pytest.raises(ValueError, match="not a valid guarantee_rate"):
        quota_settings(["p=high"])
    with pytest.raises(ValueError, match="guarantee_rate must be in"):
        quota_settings(["p=1.5"])
