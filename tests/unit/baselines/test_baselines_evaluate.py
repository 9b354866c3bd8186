"""`gfs evaluate`: config freezing, aggregation arithmetic, and that a frozen config reproduces its
own report (run twice on a tiny grid, same numbers)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from gfs.services.simulator.evaluate import (
    aggregate,
    grid_cells,
    relative_change,
    run_grid,
    spread,
    with_derived,
)
from gfs.services.simulator.evaluate_config import load_config, parse_config
from gfs.services.simulator.evaluate_report import build_report, write_report
from gfs.services.simulator.evaluate_trace import narrow_gangs, thin_hp
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode


def _nodes(tmp_path: Path) -> Path:
    rows = ["gpu_model,gpu_capacity_num,cpu_num,node_name"]
    rows += [f"A100-SXM4-80GB,8,96,a{i}" for i in range(6)] + [f"A10,1,32,b{i}" for i in range(8)]
    path = tmp_path / "node_info_df.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _config(tmp_path: Path) -> Path:
    data = {
        "name": "tiny",
        "nodes": str(_nodes(tmp_path)),
        "node_fraction": 1.0,
        "generator": {"days": 33, "scale": 0.01},
        "seeds": [0, 1],
        "loads": [1.0],
        "policies": ["gfs", "k8s-priority"],
        "window_days": 2,
        "drain_days": 0.5,
        "workers": 1,
        "sensitivity": {
            "policy": "gfs",
            "load": 1.0,
            "seeds": [0],
            "guarantee_rates": [0.8],
            "guarantee_hours": [2],
        },
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_frozen_config_reproduces_its_report(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path)).frozen()
    cells = grid_cells(cfg)
    assert len(cells) == 2 * 2 + 1 + 1  # policies x seeds, one p point, one H point
    first = run_grid(cfg, cells)
    out = tmp_path / "report"
    write_report(out, build_report(cfg, first, aggregate(cfg, first), 0.0), cfg)
    # Rerun from the frozen file the report wrote: same hash, same numbers.
    again_cfg = load_config(out / "config.frozen.json").frozen()
    assert again_cfg.digest() == cfg.digest()
    second = run_grid(again_cfg, grid_cells(again_cfg))
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in second]
    saved = json.loads((out / "report.json").read_text())
    assert saved["results"] == json.loads(json.dumps(strip))
    assert saved["header"]["config_sha256"] == cfg.digest()
    assert any(r["metrics"]["lp_tasks"] > 0 for r in first)  # the tiny grid has spot work to compare
    for name in ("report.md", "tradeoff.png", "pools.png", "sensitivity.png"):
        assert (out / name).stat().st_size > 0


def test_changed_node_inventory_is_refused(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path)).frozen()
    Path(cfg.nodes).write_text(Path(cfg.nodes).read_text() + "A10,1,32,extra\n")
    with pytest.raises(ValueError, match="changed"):
        cfg.frozen()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"policies": ["fifo"], "reference": "gfs"}, "reference"),
        ({"node_fraction": 0}, "node_fraction"),
        ({"colour": "blue"}, "unknown"),
        ({"policies": ["gfs", "fifo+gfs-quota"]}, "unknown policies: fifo\\+gfs-quota"),
        (
            {"policies": ["gfs"], "sensitivity": {"policy": "gsf", "load": 1.0, "seeds": [0]}},
            "unknown policies: gsf",
        ),
    ],
    ids=["reference-not-run", "zero-fraction", "unknown-key", "unknown-policy", "unknown-sensitivity-policy"],
)
def test_bad_config_is_rejected(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(data)


def test_spread_and_relative_change_by_hand() -> None:
    s = spread([1.0, 2.0, 6.0])
    # mean 3; sample variance ((-2)^2 + (-1)^2 + 3^2) / 2 = 7
    assert (s["mean"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 6.0, 3.0)
    assert s["std"] == pytest.approx(math.sqrt(7.0))
    assert relative_change(0.06, 0.08) == pytest.approx(-25.0)
    assert relative_change(0.0, 0.0) == 0.0
    assert math.isnan(relative_change(1.0, 0.0))


def test_evictions_per_spot_gpu_hour_by_hand() -> None:
    cell = {"key": "k", "metrics": {"evictions": 3.0, "lp_gpu_hours_completed": 1500.0}}
    assert with_derived(cell)["metrics"]["lp_evictions_per_kgpuh"] == pytest.approx(2.0)
    assert cell["metrics"].keys() == {"evictions", "lp_gpu_hours_completed"}  # input left alone
    none_done = {"key": "k", "metrics": {"evictions": 0.0, "lp_gpu_hours_completed": 0.0}}
    assert with_derived(none_done)["metrics"]["lp_evictions_per_kgpuh"] == 0.0


def _trace_for_shaping() -> Trace:
    nodes = (TraceNode("a", "P", 8, 8), TraceNode("b", "P", 8, 8))  # pool P: 16 GPUs

    def job(name: str, cls: str, gpus: float, workers: int) -> TraceJob:
        return TraceJob(name, "o", "P", 1.0, gpus, workers, 0.0, 100.0, cls)  # type: ignore[arg-type]

    jobs = [job(f"h{i}", "HP", 1, 1) for i in range(200)] + [
        job("gang", "SPOT", 4, 5),
        job("s", "SPOT", 1, 1),
    ]
    return Trace(nodes=nodes, jobs=tuple(jobs), horizon_s=1000.0)


def test_gang_wider_than_half_the_pool_is_narrowed() -> None:
    # Pool 16 GPUs, share 0.5 -> at most 8 GPUs: the 4-GPU x 5-worker gang (20) keeps floor(8/4) = 2.
    trace, narrowed = narrow_gangs(_trace_for_shaping(), 0.5)
    gang = next(j for j in trace.jobs if j.name == "gang")
    assert (narrowed, gang.workers) == (1, 2)


def test_hp_thinning_is_nested_and_spares_spot() -> None:
    base = _trace_for_shaping()
    kept = {load: {j.name for j in thin_hp(base, seed=3, load=load)[0].jobs} for load in (0.5, 0.8, 1.0)}
    assert kept[0.5] <= kept[0.8] <= kept[1.0] == {j.name for j in base.jobs}
    assert {"gang", "s"} <= kept[0.5]
    hp_kept = len([n for n in kept[0.8] if n.startswith("h")])
    assert 130 <= hp_kept <= 190  # Binomial(200, 0.8): mean 160, sd 5.7; this window is +-5 sd
