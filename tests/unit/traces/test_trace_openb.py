"""The openb (Alibaba cluster-trace-gpu-v2023) loader, on small hand-written files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfs.services.simulator.traces.gfs_format import TraceFormatError
from gfs.services.simulator.traces.openb import load_openb, load_openb_with_report

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,96000,393216,8,G2
n2,32000,262144,0,
"""
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time"
)
PODS = [
    "p3,4000,1024,1,460,,BE,Running,50,500,60",  # shared GPU: 0.46; runs 500 - 60 = 440 s
    "p1,8000,1024,2,1000,P100,LS,Running,10,110,10",  # 2 whole GPUs on P100
    "p2,1000,1024,0,0,,LS,Running,20,30,20",  # no GPU: dropped
    "p4,2000,1024,8,1000,V100M16|G2,Guaranteed,Succeeded,50,80,55",  # first spec with nodes: G2
    "p5,2000,1024,1,1000,,Burstable,Pending,70,100,",  # never scheduled: 100 - 70 = 30 s
]


def write(tmp_path: Path, pods: list[str], header: str = HEADER) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text("\n".join([header, *pods]) + "\n")
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def test_mapping(tmp_path: Path) -> None:
    trace, report = load_openb_with_report(*write(tmp_path, PODS))
    assert [n.name for n in trace.nodes] == ["n0", "n1"]  # CPU-only node left out
    assert [j.name for j in trace.jobs] == ["p1", "p3", "p4", "p5"]  # creation order
    got = {j.name: (j.job_class, j.gpu_model, j.gpus_per_worker, j.workers, j.duration_s) for j in trace.jobs}
    # default pool = the model with the most GPUs (G2: 8 vs P100: 2)
    assert got == {
        "p1": ("HP", "P100", 2.0, 1, 100.0),
        "p3": ("SPOT", "G2", 0.46, 1, 440.0),
        "p4": ("HP", "G2", 8.0, 1, 25.0),
        "p5": ("SPOT", "G2", 1.0, 1, 30.0),
    }
    assert (report.pods_read, report.dropped_no_gpu, report.unspecified_model) == (5, 1, 2)


def test_single_pool(tmp_path: Path) -> None:
    trace = load_openb(*write(tmp_path, PODS), single_pool=True)
    assert {n.gpu_model for n in trace.nodes} == {j.gpu_model for j in trace.jobs} == {"openb"}


@pytest.mark.parametrize(
    ("pods", "header", "message"),
    [
        pytest.param(["p1,1,1,1,1000"], "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
                     "missing column(s) gpu_spec, qos, creation_time", id="multigpu30-columns"),
        pytest.param(["p1,1,1,1,1000,,XX,Running,0,10,0"], HEADER, "unknown value 'XX'", id="qos"),
        pytest.param(["p1,1,1,1,1000,,LS,Running,0,10,20"], HEADER, "negative duration", id="negative"),
        pytest.param(["p1,1,1,1,1000,K80,LS,Running,0,10,0"], HEADER, "names no model", id="spec"),
    ],
)  # fmt: skip
def test_rejections(tmp_path: Path, pods: list[str], header: str, message: str) -> None:
    with pytest.raises(TraceFormatError) as err:
        load_openb(*write(tmp_path, pods, header))
    assert message in str(err.value)
