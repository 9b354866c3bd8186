"""The MMPP trace generator's configuration: every knob, frozen, hashable, round-trips through JSON.

The knobs a robustness study turns are at the top (load, spot load, gang-heaviness, burstiness,
seed); the arrival-modulator parameters below them are calibrated to the published statistics
(docs/trace-generator.md, "The second generator"). A run writes its config and a SHA-256 of it
(seed included) to DIR/generator.json.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from gfs.services.simulator.traces import mmpp_tables as tables


@dataclass(frozen=True, slots=True)
class MmppConfig:
    days: float = 62.0
    seed: int = 0
    # Time-averaged requested HP GPUs / capacity, in every pool, over [load_start_day, days)
    # (durations clipped at the end). > 1 is an over-subscribed pool: HP alone asks for more than it holds.
    hp_load: float = 0.8
    # The HP load is measured over [load_start_day, days): e.g. the simulator's evaluation window,
    # so the knob is the load the scored period sees (the arrival level drifts with the regimes).
    load_start_day: float = 0.0
    # The same for spot, cluster-wide, over [spot_start_day, days): spot arrives only from then on
    # (the simulator drops spot jobs submitted before its evaluation window anyway). With
    # `spot_published_mix` the pools get it in the published trace's proportions (most on A100,
    # A800 and GPU-series-2, little on A10); without it every pool gets the same spot load.
    spot_load: float = 0.03
    spot_start_day: float = 31.0
    spot_published_mix: bool = True
    # Extra share of HP jobs drawn as wide gangs: whole-node workers (the pool's largest node
    # size per worker), at least `wide_gang_min_workers` of them, sizes from the published worker
    # pmf above that floor. 0 = only the published gang mix.
    wide_gang_share: float = 0.0
    wide_gang_min_workers: int = 4
    # Share of jobs whose gpu_request is redrawn uniformly from the pool's odd sizes (fractions on
    # 1-GPU-node pools; 3, 5, 6, 7 where nodes have 8): leftovers that fit few others, i.e.
    # fragmentation. 0 = only the published size mix.
    odd_size_share: float = 0.0
    # No gang asks for more than this share of the worker slots its pool has for its size (a
    # wider one could block a pool for the whole run, or never fit on a scaled-down pool).
    max_gang_share: float = 0.5
    # Issue 35: extra share of HP jobs drawn as giant gangs, whole-node workers asking for a share
    # of the pool's slots for that size drawn uniformly from `giant_gang_pool_share` (not capped by
    # `max_gang_share`): the gangs that drain half a pool or more. Pools whose largest node has one
    # GPU get none (a whole-node worker there is a single GPU, not a gang that drains nodes).
    giant_gang_share: float = 0.0
    giant_gang_pool_share: tuple[float, float] = (0.5, 0.75)
    # Issue 35: extra share of HP jobs whose duration is drawn log-uniformly from `long_hp_days`
    # (long-running HP on the nodes a gang waits for), instead of the published law.
    long_hp_share: float = 0.0
    long_hp_days: tuple[float, float] = (2.0, 8.0)
    # Exponent on the modulators' log-levels: 0 = a plain Poisson process with the hour-of-day and
    # weekday profile, 1 = the calibrated burstiness, 2 = twice the log-amplitude. The levels are
    # renormalised to a stationary mean of 1, so the knob never changes the mean rate.
    burstiness: float = 1.0
    # Arrivals start this long before t = 0; jobs still running at t = 0 become the t = 0
    # population (submit 0, their remaining duration): a stationary start, not a seeded one.
    # 184 days = the longest duration the tables allow, so the start is stationary exactly.
    burn_in_days: float = 184.0
    # Slow modulator (day-scale regimes, shared by every pool of a job type): levels, mean sojourn
    # per state in days, and the weights of the next state on leaving one.
    slow_levels: tuple[float, ...] = (0.55, 1.0, 1.6, 4.0)
    slow_sojourn_days: tuple[float, ...] = (7.0, 9.0, 5.0, 1.5)
    slow_jump_weights: tuple[float, ...] = (0.35, 0.4, 0.2, 0.05)
    # Fast modulator (hour-scale on/off bursts, one per pool and job type).
    fast_levels: tuple[float, ...] = (0.45, 2.0)
    fast_sojourn_hours: tuple[float, ...] = (5.0, 2.5)
    fast_jump_weights: tuple[float, ...] = (1.0, 1.0)
    # Same-second batches: each arrival event brings 1 + Geometric extra jobs, mean `mean_batch`.
    mean_batch: float = 1.12
    hour_index: tuple[float, ...] = tables.HOUR_INDEX
    hp_weekday: tuple[float, ...] = tables.WEEKDAY["HP"]
    spot_weekday: tuple[float, ...] = tables.WEEKDAY["SPOT"]
    # Candidate jobs are drawn at this multiple of the rate the load needs, then a random subset
    # that meets the load is kept (uniform thinning keeps the arrival process's shape).
    candidate_margin: float = 1.4

    def __post_init__(self) -> None:
        checks = (
            (self.days > 0, "days must be > 0"),
            (self.hp_load >= 0 and self.spot_load >= 0, "hp_load and spot_load must be >= 0"),
            (0 <= self.spot_start_day < self.days, "spot_start_day must be in [0, days)"),
            (0 <= self.load_start_day < self.days, "load_start_day must be in [0, days)"),
            (0 <= self.wide_gang_share <= 1, "wide_gang_share must be in [0, 1]"),
            (self.wide_gang_min_workers >= 2, "wide_gang_min_workers must be >= 2"),
            (0 <= self.odd_size_share <= 1, "odd_size_share must be in [0, 1]"),
            (0 < self.max_gang_share <= 1, "max_gang_share must be in (0, 1]"),
            (0 <= self.giant_gang_share <= 1, "giant_gang_share must be in [0, 1]"),
            (
                len(self.giant_gang_pool_share) == 2
                and 0 < self.giant_gang_pool_share[0] <= self.giant_gang_pool_share[1] <= 1,
                "giant_gang_pool_share must be (lo, hi) with 0 < lo <= hi <= 1",
            ),
            (0 <= self.long_hp_share <= 1, "long_hp_share must be in [0, 1]"),
            (
                len(self.long_hp_days) == 2 and 0 < self.long_hp_days[0] <= self.long_hp_days[1],
                "long_hp_days must be (lo, hi) with 0 < lo <= hi",
            ),
            (self.burstiness >= 0, "burstiness must be >= 0"),
            (self.burn_in_days >= 0, "burn_in_days must be >= 0"),
            (self.mean_batch >= 1, "mean_batch must be >= 1"),
            (self.candidate_margin > 1, "candidate_margin must be > 1"),
            (len(self.hour_index) == 24, "hour_index needs 24 values"),
            (len(self.hp_weekday) == 7 and len(self.spot_weekday) == 7, "weekday factors need 7 values"),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(f"mmpp config: {message}")
        for name in ("slow", "fast"):
            levels = getattr(self, f"{name}_levels")
            sojourn = getattr(self, f"{name}_sojourn_days" if name == "slow" else "fast_sojourn_hours")
            jumps = getattr(self, f"{name}_jump_weights")
            if not (len(levels) == len(sojourn) == len(jumps) >= 1):
                raise ValueError(
                    f"mmpp config: {name} modulator: levels, sojourns and weights differ in length"
                )
            if min(levels) <= 0 or min(sojourn) <= 0 or min(jumps) < 0:
                raise ValueError(f"mmpp config: {name} modulator: levels and sojourns must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of every parameter, seed included."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MmppConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown mmpp generator parameter(s): {', '.join(unknown)}")
        # JSON lists back to the tuples the frozen config holds, so the digest is stable.
        kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**kwargs)
