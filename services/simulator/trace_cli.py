"""`gfs trace`: generate a GFS-format trace (the calibrated generator, or the MMPP one), extract its
HP demand series, print statistics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from gfs.services.platform.cli_output import Output, OutputOption, echo_json

app = typer.Typer(
    no_args_is_help=True, help="GFS-format traces: synthesise (synth, mmpp), HP demand series, statistics."
)


@app.command()
def synth(
    nodes: Annotated[Path, typer.Option(help="node_info_df.csv (the real inventory, or any in its format)")],
    out: Annotated[Path, typer.Option(help="output directory (GFS format + generator.json)")],
    days: Annotated[float, typer.Option(help="trace length in days")] = 184.0,
    scale: Annotated[float, typer.Option(help="multiplies the arrival rate and the t = 0 population")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed of the numpy Generator")] = 0,
    start_day: Annotated[
        int, typer.Option(help="trace day 0 = this day of the calibrated profile (Spot starts on day 31)")
    ] = 0,
    no_a10_cap: Annotated[
        bool, typer.Option("--no-a10-cap", help="keep the real trace's 1.33x A10 HP over-subscription")
    ] = False,
) -> None:
    """Generate a calibrated synthetic trace over the node inventory in NODES."""
    import dataclasses

    from gfs.services.simulator.traces.gfs_format import read_nodes
    from gfs.services.simulator.traces.synth_config import GeneratorConfig
    from gfs.services.simulator.traces.synthetic import synthesize

    if days <= 0 or scale <= 0:
        raise typer.BadParameter("--days and --scale must be > 0")
    if start_day < 0:
        raise typer.BadParameter("--start-day must be >= 0")
    config = GeneratorConfig(days=days, scale=scale, seed=seed)
    config = dataclasses.replace(
        config, arrivals=dataclasses.replace(config.arrivals, profile_start_day=start_day)
    )
    if no_a10_cap:
        config = dataclasses.replace(config, a10_cap=dataclasses.replace(config.a10_cap, enabled=False))
    meta = synthesize(config, read_nodes(nodes), out)
    typer.echo(
        f"wrote {meta['jobs']:,} jobs ({meta['hp_jobs']:,} HP, {meta['spot_jobs']:,} Spot) to {out} "
        f"in {meta['generate_wall_s']:.1f} s; A10 cap {meta['a10_cap']} "
        f"({meta['a10_hp_jobs_dropped_by_cap']:,} A10 HP jobs dropped); config sha256 "
        f"{meta['config_sha256'][:12]}"
    )


@app.command()
def mmpp(
    nodes: Annotated[Path, typer.Option(help="node_info_df.csv (the real inventory, or any in its format)")],
    out: Annotated[Path, typer.Option(help="output directory (GFS format + generator.json)")],
    days: Annotated[float, typer.Option(help="trace length in days")] = 62.0,
    hp_load: Annotated[
        float, typer.Option(help="time-averaged requested HP GPUs / capacity, in every pool")
    ] = 0.8,
    spot_load: Annotated[float, typer.Option(help="the same for spot, from --spot-start-day on")] = 0.03,
    spot_start_day: Annotated[float, typer.Option(help="spot arrives from this day on")] = 31.0,
    load_start_day: Annotated[
        float, typer.Option(help="the HP load is met over [this day, --days): e.g. the evaluation window")
    ] = 0.0,
    wide_gang_share: Annotated[
        float, typer.Option(help="extra share of HP jobs drawn as wide whole-node gangs (0-1)")
    ] = 0.0,
    burstiness: Annotated[
        float, typer.Option(help="0 = Poisson with daily/weekly profile, 1 = calibrated, 2 = burstier")
    ] = 1.0,
    node_fraction: Annotated[
        float, typer.Option(help="keep every round(1/f)-th node of each pool (a smaller cluster, same shape)")
    ] = 1.0,
    pools: Annotated[
        list[str] | None, typer.Option("--pool", help="keep only this GPU model's nodes (repeatable)")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of every random stream")] = 0,
) -> None:
    """Generate a trace from the second generator (Markov-modulated Poisson arrivals, load per pool)."""
    from gfs.services.simulator.evaluate_trace import scaled_nodes, select_pools
    from gfs.services.simulator.traces.gfs_format import read_nodes
    from gfs.services.simulator.traces.mmpp import synthesize_mmpp
    from gfs.services.simulator.traces.mmpp_config import MmppConfig

    if not 0 < node_fraction <= 1:
        raise typer.BadParameter("--node-fraction must be in (0, 1]")
    try:
        config = MmppConfig(
            days=days, seed=seed, hp_load=hp_load, load_start_day=load_start_day, spot_load=spot_load,
            spot_start_day=spot_start_day, wide_gang_share=wide_gang_share, burstiness=burstiness,
        )  # fmt: skip
        inventory = select_pools(scaled_nodes(read_nodes(nodes), node_fraction), tuple(pools or ()))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    meta = synthesize_mmpp(config, inventory, out)
    typer.echo(
        f"wrote {meta['jobs']:,} jobs ({meta['hp_jobs']:,} HP, {meta['spot_jobs']:,} Spot, "
        f"{meta['jobs_at_t0']:,} running at t = 0) on {len(inventory):,} nodes to {out} in "
        f"{meta['generate_wall_s']:.1f} s; config sha256 {meta['config_sha256'][:12]}"
    )


@app.command()
def demand(
    trace: Annotated[Path, typer.Option(help="GFS-format trace directory")],
    out: Annotated[Path, typer.Option(help="canonical CSV: time,tenant,pool,demand_gpus")],
) -> None:
    """Write the HP demand series (hourly peaks per pool and tenant) as the canonical CSV."""
    from gfs.services.simulator.demand import hp_demand_series, write_canonical_csv
    from gfs.services.simulator.traces.gfs_format import load_gfs_trace

    started = time.perf_counter()
    series = hp_demand_series(load_gfs_trace(trace))
    write_canonical_csv(series, out)
    typer.echo(
        f"wrote {len(series.keys)} series x {series.n_hours} hours to {out} "
        f"in {time.perf_counter() - started:.1f} s"
    )


@app.command()
def stats(
    trace: Annotated[Path, typer.Option(help="GFS-format trace directory")],
    markdown: Annotated[bool, typer.Option("--markdown", help="print a Markdown table")] = False,
    output: OutputOption = Output.table,
) -> None:
    """Print the trace's key statistics next to the real GFS trace's published values."""
    from rich.console import Console
    from rich.table import Table

    from gfs.services.simulator.demand import hp_demand_series, pool_totals
    from gfs.services.simulator.traces.columns import JobColumns
    from gfs.services.simulator.traces.gfs_format import load_gfs_trace
    from gfs.services.simulator.traces.trace_stats import StatRow, compute_stats, format_table

    loaded = load_gfs_trace(trace)
    rows = compute_stats(JobColumns.from_trace(loaded), loaded.nodes, loaded.horizon_s)
    peaks = pool_totals(hp_demand_series(loaded))
    for pool, series in sorted(peaks.items()):
        cap = sum(n.gpus for n in loaded.nodes if n.gpu_model == pool)
        if cap:
            rows.append(StatRow(f"{pool}: HP demand hourly peak max / capacity", float(series.max()) / cap,
                                None, "demand.py (A10: <= 0.9 with the cap)"))  # fmt: skip
    if output is Output.json:
        # NaN (a short trace without Spot jobs) is no JSON number: null, like a missing target.
        def number(value: float | None) -> float | None:
            return None if value is None or value != value else value

        echo_json([
            {"statistic": r.name, "target": number(r.target), "generated": number(r.generated),
             "unit": r.unit, "source": r.source}
            for r in rows
        ])  # fmt: skip
        return
    if markdown:
        typer.echo(format_table(rows))
        return
    table = Table(title=f"trace statistics: {trace}")
    for column in ("statistic", "target", "generated", "source"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.name, r.text(r.target), r.text(r.generated), r.source)
    Console().print(table)


@app.command("convert-openb")
def convert_openb(
    nodes: Annotated[Path, typer.Option(help="openb node list (e.g. openb_node_list_gpu_node.csv)")],
    pods: Annotated[Path, typer.Option(help="openb pod list with qos and times (not multigpu30)")],
    out: Annotated[Path, typer.Option(help="output directory in the GFS format")],
    single_pool: Annotated[
        bool, typer.Option("--single-pool", help="one pool for all GPU models (FGD's unconstrained pods)")
    ] = False,
) -> None:
    """Convert an openb (v2023) trace to the GFS format: LS, Guaranteed -> HP; BE, Burstable -> Spot."""
    from gfs.services.simulator.traces.gfs_format import write_gfs_trace
    from gfs.services.simulator.traces.openb import load_openb_with_report

    trace, report = load_openb_with_report(nodes, pods, single_pool=single_pool)
    write_gfs_trace(trace, out)
    typer.echo(
        f"wrote {len(trace.jobs):,} jobs on {len(trace.nodes):,} nodes to {out}; dropped "
        f"{report.dropped_no_gpu:,} pods without GPUs; {report.unspecified_model:,} pods without "
        f"gpu_spec sent to {report.default_model}"
    )
