"""Is the quoted survival probability calibrated? Measured on simulated weeks (issue 27 item 1).

`python -m gfs.services.simulator.calibration [CONFIG] --out DIR` (default
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
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gfs.services.core.guarantee import OFFERED_GUARANTEE_HOURS
from gfs.services.core.ids import PoolId, TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.quota import QuotaSettings
from gfs.services.core.runtime import Started, Stopped
from gfs.services.core.survival import (
    HpOutlook,
    pool_terms,
    raw_survival,
)
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.simulator.calibration_scoring import Quoted, fit, report
from gfs.services.simulator.engine import HORIZON_H, Simulation
from gfs.services.simulator.evaluate import MAX_JOB_SHARE
from gfs.services.simulator.evaluate_config import EvaluateConfig, parse_config, resolve_nodes
from gfs.services.simulator.evaluate_trace import regime_trace
from gfs.services.simulator.runner import ForecastSource, RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.gfs_format import read_nodes

HOUR_S = 3600.0
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "configs" / "calibration-survival.yaml"


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
        hour, fc = self.forecasts.cache
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
    parser = argparse.ArgumentParser(prog="python -m gfs.services.simulator.calibration", description=__doc__)
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
