"""`gfs evaluate-budgets`: GFS with and without a per-tenant eviction budget on the same traces
(several seeds), printing fairness and total cost side by side (services/simulator/budget_eval.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def evaluate_budgets(
    config: Annotated[
        Path,
        typer.Option(
            help="grid config whose generator, cluster and window are used (configs/evaluate-budgets.yaml)"
        ),
    ],
    seed: Annotated[list[int] | None, typer.Option("--seed", help="generator seed (repeatable)")] = None,
    load: Annotated[float, typer.Option(help="HP load level of the trace")] = 1.0,
    max_evictions: Annotated[int, typer.Option(help="every spot tenant's budget, per pool")] = 2,
    per: Annotated[
        str, typer.Option(help="the budget's window: day (rolling 24 h) or periods (per 100)")
    ] = "day",
    min_periods: Annotated[
        int, typer.Option(help="tenants with fewer guarantee periods are left out of the spread")
    ] = 20,
    policy: Annotated[
        str, typer.Option(help="a policy with GFS's victim selector (gfs, gfs-no-forecast, ...)")
    ] = "gfs",
    json_out: Annotated[Path | None, typer.Option("--json", help="write every run's numbers here")] = None,
) -> None:
    """Per seed: GFS without budgets, then with every spot tenant under the same budget."""
    from gfs.services.core.tenant_budget import BudgetWindow, TenantBudget
    from gfs.services.simulator.budget_eval import markdown, run_budgeted
    from gfs.services.simulator.evaluate_config import load_config

    try:
        budget = TenantBudget(max_evictions, BudgetWindow(per))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    cfg = load_config(config)
    pairs = []
    for s in seed or [0, 1, 2]:
        try:
            plain = run_budgeted(cfg, s, load, None, min_periods, policy)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        budgeted = run_budgeted(cfg, s, load, budget, min_periods, policy)
        pairs.append((plain, budgeted))
        typer.echo(f"seed {s}: {plain['evictions']:.0f} -> {budgeted['evictions']:.0f} evictions", err=True)
    typer.echo(
        f"{policy}; budget: {max_evictions} evictions per {per} per tenant and pool; load {load}; {config}"
    )
    typer.echo(markdown(pairs))
    if json_out is not None:
        json_out.write_text(json.dumps([{"without": a, "with": b} for a, b in pairs], indent=2) + "\n")
