"""The spot quota in force on a pool, on the wire side: which SpotQuota it came from, the last one
received, and how an SRE's freeze or override holds it (the package doc, "quota").

The driver holds the values in force and their expiry (services/core/driver); `PoolQuota` owns what
the controller knows of the messages behind them:
- `version`: "<forecast_version>@<valid_from>" of the SpotQuota in force ("" before the first),
  named in the decisions that start or evict under it;
- `last`: the last SpotQuota received, in force or held (a cleared freeze or override applies it,
  and the survival quote and the reclaim warnings read its HP demand).
"""

from __future__ import annotations

import uuid

from gfs.schemas.quota import SpotQuota
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.preemption.controller.settings import Controls
from gfs.services.preemption.controller.types import Decision, Effects


class PoolQuota:
    def __init__(self, driver: PoolDriver[uuid.UUID]) -> None:
        self.driver = driver
        self.version = ""
        self.last: SpotQuota | None = None
        # No spot task before the first quota (the package doc).
        driver.hold_quota(dict.fromkeys(driver.runtime.quota, 0.0), 1.0)

    def receive(self, quota: SpotQuota, now: float, *, mode: str | None) -> Effects:
        """A SpotQuota from the quota service: applied, or only recorded while an SRE's `mode`
        ("freeze" or "override") holds the quota."""
        self.last = quota
        if mode is not None:
            out = Effects()
            given = self.values({q.guarantee_hours: q.quota_gpus for q in quota.quotas})
            version = f"{quota.forecast_version}@{quota.valid_from.isoformat()}"
            held = {str(h): v for h, v in given.items()}
            detail = {"mode": mode, "quota": held, "version": version}
            out.decisions.append(Decision("", "quota_held", now, detail))
            return out
        return self.apply(quota, now)

    def values(self, given: dict[int, float]) -> dict[int, float]:
        """The quota per guarantee duration the runtime knows, from the durations `given`."""
        values: dict[int, float] = {}
        for hours in sorted(self.driver.runtime.quota):
            # A duration not offered (3 h) takes the next longer one's quota (tasks cannot ask it).
            longer = [given[h] for h in sorted(given) if h >= hours]
            values[hours] = longer[0] if longer else min(given.values())
        return values

    def apply(self, quota: SpotQuota, now: float) -> Effects:
        out = Effects()
        values = self.values({q.guarantee_hours: q.quota_gpus for q in quota.quotas})
        at = self.driver.at(now)
        changed = self.driver.apply_quota(values, quota.eta, now, valid_until=quota.valid_until.timestamp())
        # The simulator refreshes the node eviction scores with every quota refresh; the live
        # scheduler does it with every quota it applies, so both place on the same scores.
        self.driver.runtime.refresh_eviction_scores(at)
        self.version = f"{quota.forecast_version}@{quota.valid_from.isoformat()}"
        out.decisions.append(
            Decision(
                "",
                "quota",
                now,
                {
                    "quota": {str(h): v for h, v in values.items()},
                    "eta": quota.eta,
                    "version": self.version,
                    "changed": changed,
                },
            )
        )
        return out

    def controls_changed(self, before: Controls, wanted: Controls, now: float) -> Effects:
        """The SRE's quota mode or override changed from `before` to `wanted`: put the quota they
        call for in force ("freeze": the quota in force stays)."""
        out = Effects()
        if (wanted.quota_mode, wanted.quota_gpus) == (before.quota_mode, before.quota_gpus):
            return out
        runtime = self.driver.runtime
        if wanted.quota_mode == "override":
            self.driver.hold_quota(self.values(dict(wanted.quota_gpus)), runtime.eta)
        elif wanted.quota_mode is None:  # back to the quota service's: the last one received
            if self.last is not None:
                out.extend(self.apply(self.last, now))
            else:
                self.driver.hold_quota(dict.fromkeys(runtime.quota, 0.0), runtime.eta)
        return out

    def expire(self, now: float, *, mode: str | None) -> Effects:
        """The quota in force expired by `now` (valid_until passed, no newer SpotQuota): frozen at
        the spot GPUs running then. An SRE's freeze or override (`mode`) holds it: no expiry."""
        out = Effects()
        if mode is None and (expired := self.driver.expire_quota(now)) is not None:
            detail = {"frozen_at_gpus": expired.frozen_at_gpus}
            out.decisions.append(Decision("", "quota_expired", now, detail))
        return out
