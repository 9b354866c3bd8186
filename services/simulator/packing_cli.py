"""`gfs packing`: the openb packing study (services/simulator/packing.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_POLICIES = "gfs,fifo,k8s-priority,lyra,fgd,chronus"


def packing(
    pods: Annotated[Path, typer.Option(help="openb pod list (openb_pod_list_default.csv or a re-sampling)")],
    nodes: Annotated[Path, typer.Option(help="openb GPU node list (openb_node_list_gpu_node.csv)")],
    out: Annotated[Path, typer.Option(help="output directory (packing.md, packing.json, packing.png)")],
    policies: Annotated[str, typer.Option(help="comma-separated policy names")] = DEFAULT_POLICIES,
) -> None:
    """Fill the openb cluster with its pods in creation order under each policy's placement."""
    from gfs.services.simulator.packing import pack_policies, summary_rows
    from gfs.services.simulator.traces.openb import load_openb_with_report

    trace, rep = load_openb_with_report(nodes, pods, single_pool=True)
    results = pack_policies(trace, [p.strip() for p in policies.split(",") if p.strip()])
    rows = summary_rows(results)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "pods_file": str(pods),
        "nodes_file": str(nodes),
        "pods_read": rep.pods_read,
        "dropped_no_gpu": rep.dropped_no_gpu,
        "pods_packed": len(trace.jobs),
        "requested_gpus": sum(j.total_gpus for j in trace.jobs),
        "capacity": results[0].capacity if results else 0,
        "summary": rows,
        "curves": [r.to_dict() for r in results],
    }
    (out / "packing.json").write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    lines = [
        f"# openb packing study: {pods.name}",
        "",
        f"{len(trace.jobs)} GPU pods ({rep.dropped_no_gpu} without GPU dropped) asking "
        f"{payload['requested_gpus']:.1f} GPUs, on {payload['capacity']} GPUs; filled in creation order.",
        "",
        "Checkpoints every 5% of the requested GPUs; fragmentation = FGD's expected unusable free GPUs "
        "(plus shared-GPU leftovers) / free GPUs.",
        "",
        "| policy | placement | first failure at | allocation then | frag 50% | frag 70% | frag 90% "
        "| failed pods | failed GPUs | allocation at end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        first = "none" if r["first_failure_share"] is None else f"{r['first_failure_share']:.2f}"
        cells = [
            r["policy"], r["placement"], first, f"{r['allocation_at_first_failure']:.4f}",
            f"{r['frag_50']:.3f}", f"{r['frag_70']:.3f}", f"{r['frag_90']:.3f}", str(r["failed_pods"]),
            f"{r['failed_gpus']:.1f}", f"{r['final_allocation']:.4f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    (out / "packing.md").write_text("\n".join(lines) + "\n")
    _plot(out, results)
    typer.echo("\n".join(lines))


def _plot(out: Path, results: list) -> None:  # type: ignore[type-arg]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        xs = [p.arrived_share for p in r.points]
        axes[0].plot(xs, [p.allocation for p in r.points], marker=".", label=f"{r.policy} ({r.placement})")
        axes[1].plot(xs, [p.fragmented_gpus for p in r.points], marker=".", label=r.policy)
    axes[0].set_xlabel("share of requested GPUs arrived")
    axes[0].set_ylabel("GPU allocation")
    axes[1].set_xlabel("share of requested GPUs arrived")
    axes[1].set_ylabel("fragmented GPUs (FGD, expected)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "packing.png", dpi=110)
    plt.close(fig)
