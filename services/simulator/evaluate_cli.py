"""`gfs evaluate --config FILE --out DIR`: the baseline/ablation grid and its report.

Each finished cell is appended to DIR/cells.jsonl at once, so an interrupted grid keeps its work:
`--resume` reruns only the missing cells (refused if the config hash differs), and
`--report-only` writes the report from the cells finished so far. A robustness suite (a config
with regimes) runs and reports the seeds of one split: `--split test` (default) or `--split dev`;
both splits' cells may share one cells file (their seeds differ).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer


def evaluate(
    config: Annotated[Path, typer.Option(help="YAML/JSON grid config (configs/evaluate-default.yaml)")],
    out: Annotated[Path, typer.Option(help="report directory (report.md, report.json, plots)")],
    workers: Annotated[int | None, typer.Option(help="worker processes (default: the config's, 2)")] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="keep the cells already in OUT/cells.jsonl")
    ] = False,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="write the report from OUT/cells.jsonl, run nothing")
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="run only this policy's cells of the grid now (repeatable; implies --resume): "
            "e.g. the baselines while the reference is still being developed",
        ),
    ] = None,
    split: Annotated[
        str, typer.Option(help="suite configs: the seeds to run and report, test (default) or dev")
    ] = "test",
    regime: Annotated[
        list[str] | None,
        typer.Option(
            "--regime",
            help="suite configs: run only this regime's cells now (repeatable; implies --resume), "
            "e.g. a suite run in parts",
        ),
    ] = None,
) -> None:
    """Run policies x seeds x HP load levels (+ GFS sensitivity), or a suite's regimes; write the report."""
    import dataclasses

    from gfs.services.simulator.evaluate import aggregate, grid_cells, run_grid
    from gfs.services.simulator.evaluate_config import load_config
    from gfs.services.simulator.evaluate_report import build_report, write_report

    cfg = load_config(config).frozen()
    if split not in ("dev", "test"):
        raise typer.BadParameter(f"--split {split}: dev or test")
    if only:
        unknown = sorted(
            set(only) - set(cfg.policies) - ({cfg.sensitivity.policy} if cfg.sensitivity else set())
        )
        if unknown:
            raise typer.BadParameter(f"--only {', '.join(unknown)}: not a policy of this grid")
        resume = True
    if regime:
        known = {r.name for r in cfg.regimes}
        if not known:
            raise typer.BadParameter("--regime: this config has no regimes")
        if set(regime) - known:
            raise typer.BadParameter(f"--regime {', '.join(sorted(set(regime) - known))}: not a regime here")
        resume = True
    if workers is not None:
        cfg = dataclasses.replace(cfg, workers=workers)
    out.mkdir(parents=True, exist_ok=True)
    cells_file = out / "cells.jsonl"
    done = _read_cells(cells_file, cfg.digest()) if (resume or report_only) else []
    if not (resume or report_only):
        cells_file.write_text("")
    cells = grid_cells(cfg, split)
    runnable = [c for c in cells if (not only or c.policy in only) and (not regime or c.regime in regime)]
    started = time.perf_counter()

    def record(result: dict[str, Any]) -> None:
        with cells_file.open("a") as fh:
            fh.write(json.dumps({"config_sha256": cfg.digest(), **result}, sort_keys=True) + "\n")
        typer.echo(f"[{time.perf_counter() - started:7.0f} s] {result['key']} ({result['wall_s']:.0f} s)")

    if report_only:
        keys = {c.key for c in cells}
        results = sorted((r for r in done if r["key"] in keys), key=lambda r: r["key"])
        wall = 0.0
        typer.echo(f"report from {len(results)} of {len(cells)} cells")
    else:
        results = run_grid(cfg, runnable, progress=record, done=done)
        # The file may also hold the other split's cells of a suite (same config): not this report's.
        keys = {c.key for c in cells}
        results += [r for r in done if r["key"] not in {c.key for c in runnable} and r["key"] in keys]
        results.sort(key=lambda r: r["key"])
        wall = time.perf_counter() - started
    # Cells from several runs (--resume, --only): the grid's wall time is estimated from theirs.
    estimate = report_only or bool(done)
    if estimate:
        wall = sum(r["wall_s"] for r in results) / max(1, cfg.workers)
    report = build_report(cfg, results, aggregate(cfg, results, split), wall)
    report["header"]["cells_finished"] = f"{len(results)} of {len(cells)}"
    report["timing"]["wall_is_estimate"] = estimate
    write_report(out, report, cfg)
    typer.echo(
        f"{len(results)} cells, {wall:.0f} s; config sha256 {cfg.digest()[:12]}; report in {out}/report.md"
    )


def _read_cells(path: Path, digest: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    stale = [r["key"] for r in rows if r.get("config_sha256") != digest]
    if stale:
        raise typer.BadParameter(f"{path} holds cells of another config (e.g. {stale[0]}); use a new --out")
    return [{k: v for k, v in r.items() if k != "config_sha256"} for r in rows]
