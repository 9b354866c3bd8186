"""`gfs bench sim`: wall time, events/s and peak memory of full-scale simulations.

Either `--trace DIR` (a GFS-format trace) or `--nodes FILE --days N` (a synthetic trace generated
on the fly by the traces area's generator, with its default, frozen configuration). Not a test:
it prints numbers, it does not assert them.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Benchmarks.")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


@app.command("sim")
def bench_sim(
    policy: Annotated[list[str], typer.Option("--policy", help="policy name (repeatable)")],
    trace: Annotated[Path | None, typer.Option("--trace", help="GFS-format trace directory")] = None,
    nodes: Annotated[
        Path | None, typer.Option("--nodes", help="node_info_df.csv for a synthetic trace")
    ] = None,
    days: Annotated[float, typer.Option("--days", help="synthetic trace length")] = 184.0,
    seed: Annotated[int, typer.Option("--seed", help="generator seed")] = 0,
    forecast: Annotated[str, typer.Option("--forecast")] = "persistence",
) -> None:
    """Time `gfs simulate` per policy (loading included) with the persistence forecast."""
    from gfs.services.simulator.runner import ForecastSource, RunSettings, prepare, run_one
    from gfs.services.simulator.traces.gfs_format import load_gfs_trace

    started = time.perf_counter()
    generated: Path | None = None
    if trace is None:
        if nodes is None:
            raise typer.BadParameter("give --trace DIR or --nodes FILE")
        from gfs.services.simulator.traces.gfs_format import read_nodes
        from gfs.services.simulator.traces.synth_config import GeneratorConfig
        from gfs.services.simulator.traces.synthetic import synthesize

        tmp = Path(tempfile.mkdtemp(prefix="gfs-bench-"))
        synthesize(GeneratorConfig(days=days, seed=seed), read_nodes(nodes), tmp)
        trace = generated = tmp
        typer.echo(
            f"generated synthetic trace ({days:g} days, seed {seed}) in {time.perf_counter() - started:.1f}s"
        )
    t0 = time.perf_counter()
    loaded = load_gfs_trace(trace)
    if generated is not None:
        shutil.rmtree(generated, ignore_errors=True)
    settings = RunSettings(forecast=ForecastSource(forecast), seed=seed)
    workload, demand = prepare(loaded, settings)
    load_s = time.perf_counter() - t0
    gpus = sum(n.gpus for n in loaded.nodes)
    typer.echo(
        f"trace: {len(loaded.jobs):,} jobs, {len(loaded.nodes):,} nodes, {gpus:,} GPUs; "
        f"load + demand series {load_s:.1f}s; simulated tasks {len(workload.tasks):,}"
    )
    for name in policy:
        t1 = time.perf_counter()
        result = run_one(workload, demand, name, settings)
        sim_s = time.perf_counter() - t1
        events = int(result.metrics["events"])
        typer.echo(
            f"{name:>10}: wall {load_s + sim_s:7.1f}s (load {load_s:.1f}s + sim {sim_s:.1f}s), "
            f"{events:,} events, {events / max(sim_s, 1e-9):,.0f} events/s, "
            f"peak RSS {_peak_rss_mb():,.0f} MB"
        )


@app.command("pass")
def bench_pass(
    queued: Annotated[
        list[int] | None,
        typer.Option("--queued", help="tasks queued (repeatable; default 1000, 10000, 50000)"),
    ] = None,
    passes: Annotated[int, typer.Option("--passes", help="measured passes per size")] = 300,
    sim_queued: Annotated[
        int, typer.Option("--sim-queued", help="backlog of the simulated trace (0: no simulation)")
    ] = 10000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    policy: Annotated[str, typer.Option("--policy")] = "gfs",
) -> None:
    """One scheduling pass's time against the queue's length, and a backlog-heavy simulation's
    wall time, on the scanning path (before issue 23) and the indexed one, side by side in one run
    (pass_bench.py says what is measured). It also checks that both paths decided the same."""
    from gfs.services.simulator.pass_bench import measure, simulate

    sizes = queued or [1000, 10000, 50000]
    typer.echo(f"policy {policy}, 432 nodes x 8 GPUs, ~80% full before the backlog; {passes} passes per size")
    typer.echo("pass and status times: the thread's CPU time; simulation: wall and CPU time")
    typer.echo(
        f"{'queued':>8} {'path':>9} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'status ms':>9} decisions"
    )
    for size in sizes:
        runs = {
            name: measure(size, passes, seed, policy, indexed=name == "indexed")
            for name in ("scanning", "indexed")
        }
        for name, r in runs.items():
            typer.echo(
                f"{r.queued:>8,} {name:>9} {r.mean_ms:8.3f} {r.p50_ms:8.3f} {r.p99_ms:8.3f} "
                f"{r.status_ms:9.3f} {r.decisions}"
            )
        if runs["scanning"].fingerprint != runs["indexed"].fingerprint:
            typer.echo(f"the two paths decided differently at {size} queued", err=True)
            raise typer.Exit(1)
    if sim_queued > 0:
        sims = {
            name: simulate(sim_queued, seed, policy, indexed=name == "indexed")
            for name in ("scanning", "indexed")
        }
        for name, s in sims.items():
            typer.echo(
                f"simulation ({s.jobs:,} jobs, backlog ~{sim_queued:,}) {name:>9}: "
                f"wall {s.wall_s:.2f}s, CPU {s.cpu_s:.2f}s, {s.events:,} events"
            )
        if sims["scanning"].metrics != sims["indexed"].metrics:
            typer.echo("the two paths' simulations differ", err=True)
            raise typer.Exit(1)
    typer.echo("decisions identical on both paths")


@app.command("warnings")
def bench_warnings(
    config: Annotated[
        Path, typer.Option("--config", help="robustness-suite config (configs/suite-robustness.yaml)")
    ],
    split: Annotated[str, typer.Option("--split", help="dev (choose settings) or test (report)")] = "test",
    policy: Annotated[str, typer.Option("--policy")] = "gfs",
    lead_s: Annotated[list[float] | None, typer.Option("--lead-s", help="lead time (repeatable)")] = None,
    quantile: Annotated[list[float] | None, typer.Option("--quantile", help="repeatable")] = None,
    margin: Annotated[list[float] | None, typer.Option("--margin", help="repeatable")] = None,
    checkpoint_cost_s: Annotated[
        float | None, typer.Option("--checkpoint-cost-s", help="GPU seconds one checkpoint costs")
    ] = None,
    regime: Annotated[list[str] | None, typer.Option("--regime", help="only these regimes")] = None,
    workers: Annotated[int, typer.Option("--workers")] = 2,
    out: Annotated[Path | None, typer.Option("--out", help="write warnings.md and .json here")] = None,
) -> None:
    """Lost spot GPU-hours with and without early reclaim warnings, per suite regime, on the same
    evictions; every combination of the given settings (defaults: core/reclaim_warning.py)."""
    import dataclasses
    import itertools
    import json

    from gfs.services.core.reclaim_warning import WarningSettings
    from gfs.services.simulator.evaluate_config import load_config
    from gfs.services.simulator.warning_eval import aggregate, render, run_warning_grid

    cfg = load_config(config)
    if regime:
        cfg = dataclasses.replace(cfg, regimes=tuple(r for r in cfg.regimes if r.name in regime))
    base = WarningSettings()
    variants = [
        WarningSettings(
            lead_s=lead,
            quantile=q,
            margin=m,
            checkpoint_cost_s=base.checkpoint_cost_s if checkpoint_cost_s is None else checkpoint_cost_s,
        )
        for lead, q, m in itertools.product(
            lead_s or [base.lead_s], quantile or [base.quantile], margin or [base.margin]
        )
    ]
    seeds = cfg.split_seeds(split)
    results = run_warning_grid(cfg, policy, seeds, variants, workers)
    agg = aggregate(results, len(variants))
    text = render(agg, variants, policy, split, seeds)
    typer.echo(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "warnings.md").write_text(text)
        cells = {"cells": results, "aggregate": agg}
        (out / "warnings.json").write_text(json.dumps(cells, indent=1, default=str))
