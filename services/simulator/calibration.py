"""Is the quoted survival probability calibrated? Measured on simulated weeks (issue 27 item 1).

`python -m services.simulator.calibration [CONFIG] --out DIR` (default
configs/calibration-survival.yaml; `--records DIR/records.json` rescores an earlier run's quotes
without simulating):
1. simulate GFS (with the regime's quota settings, e.g. a looser promise p) on every
   (regime, seed) of the config, `workers` at a time; every spot task accepted inside the scored
   window is quoted at its arrival, exactly as the live preemption service quotes it
   (core/survival.py: the last quota refresh's forecast of the pool's HP demand and the pool's
   state now), and the simulation records whether its first run stayed uninterrupted for 1, 2 and
   4 hours (a run that finished earlier survived; a task that never started, was cancelled, or
   whose hours reach past the scored window, after which nothing is preempted, is left out);
2. fit a monotone recalibration per quoted duration (isotonic regression, pool-adjacent
   violators) on the TRAINING runs only;
3. score it on the HELD-OUT runs (other seeds, and regimes never used for fitting): overall, per
   run and per pool, a reliability table (bins of the quoted probability: their mean quote, the
   observed survival with its 95% Wilson interval, the count), and the gap at 0.8, 0.9 and 0.95.

The quoting never changes a decision: `QuotingSimulation` only reads the pools' state after the
engine's own handlers ran (tests/sim goldens stay as they are).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml

from services.core.guarantee import OFFERED_GUARANTEE_HOURS
from services.core.ids import PoolId, TaskId
from services.core.policies.registry import build_policy
from services.core.quota import QuotaSettings
from services.core.runtime import Started, Stopped
from services.core.survival import (
    HpOutlook,
    QuoteCalibration,
    Recalibration,
    pool_terms,
    raw_survival,
)
from services.core.task import TaskClass, TaskSpec
from services.simulator.engine import HORIZON_H, Simulation
from services.simulator.evaluate import MAX_JOB_SHARE
from services.simulator.evaluate_config import EvaluateConfig, parse_config, resolve_nodes
from services.simulator.evaluate_trace import regime_trace
from services.simulator.runner import ForecastSource, RunSettings, build_simulation, prepare
from services.simulator.traces.gfs_format import read_nodes

HOUR_S = 3600.0
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "configs" / "calibration-survival.yaml"
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


@dataclass
class _Watch:
    raw: dict[int, float]
    first_start: float = math.nan
    first_eviction_run_s: float = math.nan  # run time of the first run when it was evicted


class QuotingSimulation(Simulation):
    """The engine plus the quote at every in-window spot arrival and each task's first run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outlooks: dict[PoolId, tuple[int, HpOutlook]] = {}  # pool -> (forecast hour, outlook)
        self.watched: dict[TaskId, _Watch] = {}

    def _refresh_quota(self) -> None:
        super()._refresh_quota()
        hour, fc = self.forecast_cache
        if not self.in_window or fc is None:
            return
        for pool_id in self.pools:
            try:
                q50, q90 = fc.pool_quantile(pool_id, 0.5), fc.pool_quantile(pool_id, 0.9)
            except KeyError:  # no HP history in the pool: HP demand 0, as the quota takes it
                q50 = q90 = [0.0] * HORIZON_H  # type: ignore[assignment]
            self.outlooks[pool_id] = (hour, HpOutlook.from_quantiles(list(q50), list(q90)))

    def _arrive(self, spec: TaskSpec) -> None:
        super()._arrive(spec)
        if spec.task_class is not TaskClass.SPOT or not self.in_window or spec.pool not in self.outlooks:
            return
        hour, outlook = self.outlooks[spec.pool]
        skip = int(self.now // HOUR_S) - hour
        if skip >= len(outlook.mean):
            return
        ahead = HpOutlook(outlook.mean[skip:], outlook.std[skip:])
        t = pool_terms(self.pools[spec.pool], spec.total_gpus, spec.guarantee_hours)
        raw = {h: raw_survival(h, t, ahead) for h in OFFERED_GUARANTEE_HOURS}
        self.watched[spec.task_id] = _Watch(raw)

    def _start(self, o: Started) -> None:
        super()._start(o)
        watch = self.watched.get(o.task_id)
        if watch is not None and math.isnan(watch.first_start):
            watch.first_start = self.now

    def _evict(self, o: Stopped) -> None:
        watch = self.watched.get(o.task_id)
        if (
            watch is not None
            and math.isnan(watch.first_eviction_run_s)
            and self.lives[o.task_id].evictions == 0
        ):
            watch.first_eviction_run_s = o.run_s
        super()._evict(o)

    def quoted(self) -> list[Quoted]:
        out = []
        window_end = self.w.window_end_s
        for tid, watch in self.watched.items():
            life = self.lives[tid]
            survived: dict[int, bool] = {}
            for h in OFFERED_GUARANTEE_HOURS:
                outcome = first_run_outcome(
                    h * HOUR_S,
                    start=watch.first_start,
                    evicted_after=watch.first_eviction_run_s,
                    finished=life.end,
                    cancelled=life.cancelled,
                    window_end=window_end,
                )
                if outcome is not None:
                    survived[h] = outcome
            out.append(Quoted(str(life.spec.pool), life.spec.guarantee_hours, watch.raw, survived))
        return out


def first_run_outcome(
    span_s: float, *, start: float, evicted_after: float, finished: float, cancelled: float, window_end: float
) -> bool | None:
    """Did the first run stay uninterrupted for `span_s` (True), was it interrupted (False), or is
    it not known (None: never started, cancelled first, or the span reaches past the window)?"""
    if math.isnan(start):
        return None
    if not math.isnan(evicted_after):
        return evicted_after >= span_s
    deadline = start + span_s
    if not math.isnan(cancelled) and cancelled < deadline and (math.isnan(finished) or cancelled < finished):
        return None
    if not math.isnan(finished) and finished <= window_end:
        return True  # finished (before the deadline or after it) without an eviction
    return True if deadline <= window_end else None


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


# ----- running ------------------------------------------------------------------------------------
def load_plan(path: Path) -> tuple[EvaluateConfig, dict[str, Any]]:
    """A robustness-suite config (evaluate_config.py) plus its `calibration` section: which
    regimes and seeds are for training, which are held out, and (`quota`, optional) GFS's quota
    settings per regime where they differ from the defaults (a looser promise p evicts more, which
    is what puts quotes near 0.8 and 0.9)."""
    data = yaml.safe_load(path.read_text())
    plan = data.pop("calibration")
    cfg = parse_config(data).frozen()
    plan["quota"] = {name: QuotaSettings(**fields) for name, fields in (plan.get("quota") or {}).items()}
    for regime in plan["quota"]:
        cfg.regime(regime)
    fitted = {(r, s) for r, seeds in plan["train"].items() for s in seeds}
    scored = {(r, s) for r, seeds in plan["held_out"].items() for s in seeds}
    if fitted & scored:
        raise ValueError(f"a run is both trained on and held out: {sorted(fitted & scored)}")
    for regime, _ in fitted | scored:
        cfg.regime(regime)  # KeyError for a regime the config does not define
    return cfg, plan


def run_quoting(
    cfg: EvaluateConfig, regime_name: str, seed: int, quota: QuotaSettings | None = None
) -> list[Quoted]:
    """GFS (with `quota`'s settings; None: the defaults) on one (regime, seed) of the config,
    every in-window spot task quoted."""
    regime = cfg.regime(regime_name)
    ct = regime_trace(regime, read_nodes(resolve_nodes(cfg.nodes)), seed=seed, max_job_share=MAX_JOB_SHARE)
    settings = RunSettings(
        forecast=ForecastSource(cfg.forecast),
        seed=seed,
        window_days=cfg.window_days,
        drain_days=cfg.drain_days,
    )
    workload, demand = prepare(ct.trace, settings)
    plain = build_simulation(workload, demand, build_policy("gfs", quota), settings)
    sim = QuotingSimulation(
        plain.w,
        plain.policy,
        plain.forecaster,
        plain.demand,
        plain.settings,
        plain.decision_sink,
        plain.cancel_sink,
    )
    sim.run()
    return sim.quoted()


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


def _run_one(job: tuple[Path, str, str, int]) -> tuple[str, str, int, list[Quoted], float]:
    """One (split, regime, seed) run, in a worker process: the config is re-read there (it is
    small), so nothing but paths and names crosses the process boundary."""
    path, split, regime, seed = job
    cfg, plan = load_plan(path)
    t0 = time.perf_counter()
    recs = run_quoting(cfg, regime, seed, plan["quota"].get(regime))
    return split, regime, seed, recs, time.perf_counter() - t0


def simulate_plan(path: Path, workers: int) -> dict[str, dict[str, list[Quoted]]]:
    """Every run of the plan: split -> "regime seed N" -> its quotes (run order fixed)."""
    _, plan = load_plan(path)
    jobs = [
        (path, split, regime, int(seed))
        for split in ("train", "held_out")
        for regime, seeds in plan[split].items()
        for seed in seeds
    ]
    out: dict[str, dict[str, list[Quoted]]] = {"train": {}, "held_out": {}}
    results: Iterable[tuple[str, str, int, list[Quoted], float]]
    if workers > 1:
        pool = ProcessPoolExecutor(max_workers=workers)
        results = pool.map(_run_one, jobs)
    else:
        pool = None
        results = map(_run_one, jobs)
    try:
        for split, regime, seed, recs, seconds in results:
            print(f"{split} {regime} seed {seed}: {len(recs)} quotes, {seconds:.0f} s", file=sys.stderr)
            out[split][f"{regime} seed {seed}"] = recs
    finally:
        if pool is not None:
            pool.shutdown()
    return out


def records_to_json(runs: dict[str, dict[str, list[Quoted]]]) -> dict[str, Any]:
    return {
        split: {
            run: [
                {
                    "pool": r.pool,
                    "guarantee_hours": r.guarantee_hours,
                    "raw": {str(h): p for h, p in r.raw.items()},
                    "survived": {str(h): ok for h, ok in r.survived.items()},
                }
                for r in recs
            ]
            for run, recs in by_run.items()
        }
        for split, by_run in runs.items()
    }


def records_from_json(data: dict[str, Any]) -> dict[str, dict[str, list[Quoted]]]:
    return {
        split: {
            run: [
                Quoted(
                    r["pool"],
                    int(r["guarantee_hours"]),
                    {int(h): float(p) for h, p in r["raw"].items()},
                    {int(h): bool(ok) for h, ok in r["survived"].items()},
                )
                for r in recs
            ]
            for run, recs in by_run.items()
        }
        for split, by_run in data.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.simulator.calibration", description=__doc__)
    parser.add_argument("config", nargs="?", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--out", type=Path, default=None, help="write calibration.json (and the text) here")
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="score the quotes of an earlier run's records.json instead of simulating again",
    )
    parser.add_argument("--workers", type=int, default=None, help="processes (default: the config's)")
    args = parser.parse_args(argv)
    cfg, _ = load_plan(args.config)
    if args.records is not None:
        runs = records_from_json(json.loads(args.records.read_text()))
    else:
        runs = simulate_plan(args.config, args.workers or cfg.workers)
        if args.out is not None:  # first, so that a failure in scoring loses no simulation
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "records.json").write_text(json.dumps(records_to_json(runs)) + "\n")
    train = [r for recs in runs["train"].values() for r in recs]
    recal = fit(train)
    text, data = report(train, runs["held_out"], recal)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "calibration.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        (args.out / "calibration.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
