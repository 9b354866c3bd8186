"""What the preemption service tells the forecast stream about a pool's servable HP demand.

The forecast's target series is the servable demand (services/core/servable.py, issue 35), a
function of the pool's state that only this service holds. After every pass (the points at which
the simulator takes the same levels: after an instant's events and pass) the pool's levels are
published as a `PoolDemandLevel` when they changed since the last one; the forecast stream samples
them at minute boundaries, as the simulator does.
"""

from __future__ import annotations

from gfs.schemas.pool_demand import PoolDemandLevel
from gfs.services.core.runtime import PoolRuntime
from gfs.services.preemption.controller.types import utc


class DemandLevels:
    """The levels last published for one pool (None: none yet)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[str, float] | None = None

    def after_pass(self, pool: str, runtime: PoolRuntime, now: float) -> PoolDemandLevel | None:
        """The event to publish after a pass at `now`, or None when the levels did not change (or
        the policy does not forecast the servable series)."""
        if runtime.policy.quota.settings.demand_source != "servable":
            return None
        levels = {str(t): v for t, v in runtime.servable_levels().items()}
        if levels == self.last:
            return None
        self.last = levels
        return PoolDemandLevel(pool=pool, at=utc(now), levels=levels)
