"""Scoring the survival quote's calibration (services/simulator/calibration.py runs the weeks):
the monotone recalibration fitted per quoted duration, reliability bins with 95% Wilson
intervals, the gaps at the target levels, Brier scores, and the text/JSON report. Pure: records in,
numbers out (the `--records` rescoring runs only this)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from gfs.services.core.survival import QuoteCalibration, Recalibration

# Bins of the quoted probability; the targets' levels 0.8, 0.9, 0.95 sit in the middle of theirs.
BIN_EDGES = (0.0, 0.5, 0.7, 0.75, 0.85, 0.875, 0.925, 0.975, 1.0)
TARGETS = ((0.8, (0.75, 0.85)), (0.9, (0.875, 0.925)), (0.95, (0.925, 0.975)))
TOLERANCE = 0.03
Z95 = 1.959963984540054  # Phi^-1(0.975)


@dataclass(frozen=True, slots=True)
class Quoted:
    """One spot task's quote (raw model probabilities) and what happened."""

    pool: str
    guarantee_hours: int
    raw: dict[int, float]  # hours -> raw P(uninterrupted)
    survived: dict[int, bool]  # hours -> outcome; hours left out (censored) are absent


# ----- fitting and scoring ------------------------------------------------------------------------
def isotonic(points: Iterable[tuple[float, bool]]) -> Recalibration:
    """Pool-adjacent violators on (raw probability, survived): each block of raw probabilities
    maps to its observed survival rate (knots at the block's lowest and highest raw value, so a raw
    value inside a block gets the block's rate, not a mix with its neighbour), linear between
    blocks; non-decreasing."""
    tally: dict[float, list[float]] = defaultdict(lambda: [0.0, 0.0])  # x -> [survived, count]
    for x, y in points:
        tally[x][0] += y
        tally[x][1] += 1
    blocks: list[list[float]] = []  # [lowest x, highest x, survived, count]; equal x never split
    for x in sorted(tally):
        blocks.append([x, x, *tally[x]])
        while len(blocks) > 1 and blocks[-2][2] / blocks[-2][3] >= blocks[-1][2] / blocks[-1][3]:
            last = blocks.pop()
            blocks[-1][1] = last[1]
            blocks[-1][2] += last[2]
            blocks[-1][3] += last[3]
    xs: list[float] = []
    ys: list[float] = []
    for lo, hi, survived, count in blocks:
        for x in (lo, hi) if hi > lo else (lo,):
            xs.append(x)
            ys.append(survived / count)
    return Recalibration(tuple(xs), tuple(ys))


@dataclass
class Bin:
    lo: float
    hi: float
    quoted: list[float] = field(default_factory=list)
    survived: int = 0

    @property
    def count(self) -> int:
        return len(self.quoted)

    @property
    def mean_quote(self) -> float:
        return sum(self.quoted) / len(self.quoted) if self.quoted else math.nan

    @property
    def observed(self) -> float:
        return self.survived / len(self.quoted) if self.quoted else math.nan


def reliability(pairs: Sequence[tuple[float, bool]], edges: Sequence[float] = BIN_EDGES) -> list[Bin]:
    bins = [Bin(lo, hi) for lo, hi in pairwise(edges)]
    for p, ok in pairs:
        for b in bins:
            if b.lo <= p < b.hi or (b.hi == edges[-1] and p == b.hi):
                b.quoted.append(p)
                b.survived += ok
                break
    return bins


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% at z = 1.96): unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or n successes, which is where the
    bins near 1 sit."""
    if n <= 0:
        return (math.nan, math.nan)
    phat = successes / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def target_gaps(pairs: Sequence[tuple[float, bool]]) -> dict[str, Any]:
    """Per target level: the tasks quoted within its band (TARGETS), their mean quote,
    observed survival with its 95% interval, whether observed is within +-3 points of the level
    (the target) and whether the interval still reaches that range (too few tasks to tell apart
    from a miss: `within_3pt` False but `interval_reaches` True)."""
    out: dict[str, Any] = {}
    for level, (lo, hi) in TARGETS:
        (b,) = reliability(pairs, (lo, hi))
        within = None if not b.count else abs(b.observed - level) <= TOLERANCE + 1e-12
        low, high = wilson_interval(b.survived, b.count)
        reaches = None if not b.count else low <= level + TOLERANCE and high >= level - TOLERANCE
        out[f"{level:g}"] = {
            "count": b.count,
            "mean_quote": b.mean_quote,
            "observed": b.observed,
            "ci95": [low, high],
            "within_3pt": within,
            "interval_reaches": reaches,
        }
    return out


def brier(pairs: Sequence[tuple[float, bool]]) -> float:
    """Mean squared error of the quote against the outcome (1 survived, 0 not): lower is better."""
    return sum((p - ok) ** 2 for p, ok in pairs) / len(pairs) if pairs else math.nan


def quoted_value(calibration: QuoteCalibration, hours: int, raw: float) -> float:
    """What the live service quotes for `raw` (survival.quote_terms): mapped, clamped, rounded."""
    return round(min(1.0, max(0.0, calibration(hours, raw))), 3)


def guarantee_pairs(records: Iterable[Quoted], calibration: QuoteCalibration) -> list[tuple[float, bool]]:
    return [
        (
            quoted_value(calibration, r.guarantee_hours, r.raw[r.guarantee_hours]),
            r.survived[r.guarantee_hours],
        )
        for r in records
        if r.guarantee_hours in r.survived
    ]


def all_hours_pairs(records: Iterable[Quoted], calibration: QuoteCalibration) -> list[tuple[float, bool]]:
    return [(quoted_value(calibration, h, r.raw[h]), ok) for r in records for h, ok in r.survived.items()]


def fit(train: Iterable[Quoted]) -> QuoteCalibration:
    """An isotonic map per quoted duration (1, 2, 4 h), each fitted on the training outcomes of
    that duration only (survival.QuoteCalibration says why one map per duration)."""
    by_hours: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for r in train:
        for h, ok in r.survived.items():
            by_hours[h].append((r.raw[h], ok))
    return QuoteCalibration(tuple((h, isotonic(by_hours[h])) for h in sorted(by_hours) if by_hours[h]))


def _table(bins: Sequence[Bin]) -> list[str]:
    lines = ["  bin              quoted  observed  95% interval      count"]
    for b in bins:
        if b.count:
            low, high = wilson_interval(b.survived, b.count)
            lines.append(
                f"  [{b.lo:.3f}, {b.hi:.3f})  {b.mean_quote:6.3f}  {b.observed:8.3f}  "
                f"[{low:.3f}, {high:.3f})  {b.count:6d}"
            )
    return lines


def _targets(pairs: Sequence[tuple[float, bool]]) -> tuple[list[str], dict[str, Any]]:
    gaps = target_gaps(pairs)
    lines = []
    for (level, g), (_, (lo, hi)) in zip(gaps.items(), TARGETS, strict=True):
        low, high = g["ci95"]
        lines.append(
            f"  at {level} (quoted {lo:.3f}-{hi:.3f}): n={g['count']}, "
            f"mean quote {g['mean_quote']:.3f}, observed {g['observed']:.3f} [{low:.3f}, {high:.3f}], "
            f"within 3 points: {g['within_3pt']}"
        )
    return lines, gaps


def _bins_json(bins: Sequence[Bin]) -> list[dict[str, Any]]:
    return [
        {
            "lo": b.lo,
            "hi": b.hi,
            "mean_quote": b.mean_quote,
            "observed": b.observed,
            "count": b.count,
            "ci95": list(wilson_interval(b.survived, b.count)),
        }
        for b in bins
        if b.count
    ]


def report(
    train: Sequence[Quoted], held: dict[str, list[Quoted]], calibration: QuoteCalibration
) -> tuple[str, dict[str, Any]]:
    """The text report and its JSON: raw and recalibrated, overall, per run and per pool, for the
    guarantee-duration quote and for the 1, 2 and 4 h quotes together."""
    identity = QuoteCalibration()
    lines: list[str] = []
    data: dict[str, Any] = {
        "knots": {str(h): {"x": list(m.x), "y": list(m.y)} for h, m in calibration.by_hours},
        "held_out": {},
    }
    knots = ", ".join(f"{h} h: {len(m.x)}" for h, m in calibration.by_hours)
    lines.append(f"fitted on {len(train)} training quotes; knots per duration: {knots}")
    for h, recal in calibration.by_hours:
        pts = zip(recal.x, recal.y, strict=True)
        lines.append(f"  {h} h: " + " ".join(f"{x:.3f}->{y:.3f}" for x, y in pts))
    held_all = [r for rs in held.values() for r in rs]
    by_regime: dict[str, list[Quoted]] = defaultdict(list)  # every seed of a regime together
    for run, recs in held.items():
        by_regime[run.rsplit(" seed ", 1)[0]].extend(recs)
    regimes = [(f"{regime} (all seeds)", recs) for regime, recs in by_regime.items()]
    for name, recs in [("all held-out", held_all), *regimes, *held.items()]:
        for label, mapping in (("raw", identity), ("recalibrated", calibration)):
            pairs = guarantee_pairs(recs, mapping)
            lines.append(
                f"\n{name}, {label}, guarantee-duration quotes ({len(pairs)}, Brier {brier(pairs):.5f}):"
            )
            lines.extend(_table(reliability(pairs)))
            target_lines, gaps = _targets(pairs)
            lines.extend(target_lines)
            data["held_out"].setdefault(name, {})[label] = {
                "bins": _bins_json(reliability(pairs)),
                "targets": gaps,
            }
    for label, mapping in (("raw", identity), ("recalibrated", calibration)):
        pairs = all_hours_pairs(held_all, mapping)
        lines.append(
            f"\nall held-out, {label}, quotes for 1, 2 and 4 h together "
            f"({len(pairs)}, Brier {brier(pairs):.5f}):"
        )
        lines.extend(_table(reliability(pairs)))
        target_lines, gaps = _targets(pairs)
        lines.extend(target_lines)
        data["held_out"]["all held-out"][f"{label}_all_durations"] = {
            "bins": _bins_json(reliability(pairs)),
            "targets": gaps,
            "brier": brier(pairs),
        }
    by_pool: dict[str, list[Quoted]] = defaultdict(list)
    for r in held_all:
        by_pool[r.pool].append(r)
    for pool in sorted(by_pool):
        for label, mapping in (("raw", identity), ("recalibrated", calibration)):
            pairs = all_hours_pairs(by_pool[pool], mapping)
            lines.append(
                f"\npool {pool}, {label}, held-out, 1, 2 and 4 h quotes "
                f"({len(pairs)}, Brier {brier(pairs):.5f}):"
            )
            lines.extend(_table(reliability(pairs)))
            target_lines, gaps = _targets(pairs)
            lines.extend(target_lines)
            data.setdefault("per_pool", {}).setdefault(pool, {})[label] = {
                "bins": _bins_json(reliability(pairs)),
                "targets": gaps,
            }
    return "\n".join(lines), data
