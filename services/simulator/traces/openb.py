"""Alibaba "openb" GPU trace (cluster-trace-gpu-v2023, the FGD paper, ATC'23) as a `Trace`.

Mapping, following how FGD replays it:
* nodes: the node list (`sn, cpu_milli, memory_mib, gpu, model`); nodes with no GPU are left out
  (they cannot host a GPU pod); pool = GPU model.
* pods -> jobs in creation order: one worker each; `num_gpu` whole GPUs, or `gpu_milli / 1000` of
  one GPU when `gpu_milli < 1000` (a shared GPU); pods asking for no GPU are dropped (counted).
* QoS LS and Guaranteed -> HP, BE and Burstable -> Spot.
* submit = creation_time; duration = deletion_time - scheduled_time (the run time), or
  deletion_time - creation_time for pods that never got scheduled (Pending).
* pool of a pod: the first model in its `gpu_spec` ("A|B|C") that has nodes; pods without a spec
  (every pod of the default list) go to `default_model` (by default the model with the most GPUs),
  or, with `single_pool=True`, every node and pod share one pool named "openb" (FGD lets an
  unconstrained pod use any GPU type; one pool is the closest a per-model scheduler gets).
Files without the needed columns (e.g. `multigpu30`: no qos, no times) are rejected by name.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gfs.services.simulator.traces.gfs_format import TraceFormatError, horizon_of
from gfs.services.simulator.traces.records import JobClass, Trace, TraceJob, TraceNode

NODE_COLUMNS = ("sn", "cpu_milli", "gpu", "model")
POD_COLUMNS = (
    "name", "cpu_milli", "num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time", "deletion_time",
    "scheduled_time",
)  # fmt: skip
QOS_CLASS: dict[str, JobClass] = {"LS": "HP", "Guaranteed": "HP", "BE": "SPOT", "Burstable": "SPOT"}
SINGLE_POOL = "openb"
TENANT = "openb"  # the trace has no tenants


@dataclass(frozen=True, slots=True)
class OpenbReport:
    pods_read: int
    dropped_no_gpu: int
    unspecified_model: int  # pods without gpu_spec, sent to the default pool
    default_model: str


def _rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.is_file():
        raise TraceFormatError(f"{path}: file not found")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceFormatError(
                f"{path}: missing column(s) {', '.join(missing)} needed for a replay "
                f"(found {', '.join(header)})"
            )
        return list(reader)


def _num(path: Path, line: int, column: str, text: str | None) -> float:
    try:
        return float(text or "")
    except ValueError:
        raise TraceFormatError(f"{path}:{line}: column {column}: not a number: {text!r}") from None


def read_openb_nodes(path: Path, *, single_pool: bool = False) -> tuple[TraceNode, ...]:
    nodes = []
    for line, row in enumerate(_rows(path, NODE_COLUMNS), start=2):
        gpus = int(_num(path, line, "gpu", row["gpu"]))
        if gpus <= 0:
            continue
        model = SINGLE_POOL if single_pool else row["model"].strip()
        if not model:
            raise TraceFormatError(f"{path}:{line}: GPU node without a model")
        cpus = int(_num(path, line, "cpu_milli", row["cpu_milli"]) // 1000)
        nodes.append(TraceNode(name=row["sn"].strip(), gpu_model=model, gpus=gpus, cpus=cpus))
    return tuple(nodes)


def load_openb_with_report(
    node_file: Path, pod_file: Path, *, single_pool: bool = False, default_model: str | None = None
) -> tuple[Trace, OpenbReport]:
    nodes = read_openb_nodes(Path(node_file), single_pool=single_pool)
    capacity: Counter[str] = Counter()
    for n in nodes:
        capacity[n.gpu_model] += n.gpus
    if not capacity:
        raise TraceFormatError(f"{node_file}: no GPU nodes")
    fallback = default_model or max(sorted(capacity), key=lambda m: capacity[m])
    if fallback not in capacity:
        raise TraceFormatError(f"default_model {fallback!r} has no nodes ({', '.join(sorted(capacity))})")
    path = Path(pod_file)
    rows = _rows(path, POD_COLUMNS)
    jobs: list[TraceJob] = []
    dropped = unspecified = 0
    for line, row in enumerate(rows, start=2):
        num_gpu = _num(path, line, "num_gpu", row["num_gpu"])
        milli = _num(path, line, "gpu_milli", row["gpu_milli"])
        if num_gpu <= 0:
            dropped += 1
            continue
        kind = QOS_CLASS.get(row["qos"].strip())
        if kind is None:
            raise TraceFormatError(f"{path}:{line}: column qos: unknown value {row['qos']!r}")
        gpus = milli / 1000.0 if num_gpu == 1 and 0 < milli < 1000 else num_gpu
        created = _num(path, line, "creation_time", row["creation_time"])
        deleted = _num(path, line, "deletion_time", row["deletion_time"])
        started = (
            _num(path, line, "scheduled_time", row["scheduled_time"]) if row["scheduled_time"] else created
        )
        if deleted < started:
            raise TraceFormatError(f"{path}:{line}: deletion_time before the pod started (negative duration)")
        if single_pool:
            model = SINGLE_POOL
        else:
            wanted = [m.strip() for m in (row["gpu_spec"] or "").split("|") if m.strip()]
            model = next((m for m in wanted if m in capacity), "")
            if not wanted:
                unspecified += 1
                model = fallback
            elif not model:
                raise TraceFormatError(
                    f"{path}:{line}: gpu_spec {row['gpu_spec']!r} names no model with nodes"
                )
        jobs.append(
            TraceJob(
                name=row["name"].strip(),
                organization=TENANT,
                gpu_model=model,
                cpu_request=_num(path, line, "cpu_milli", row["cpu_milli"]) / 1000.0,
                gpus_per_worker=gpus,
                workers=1,
                submit_s=created,
                duration_s=deleted - started,
                job_class=kind,
            )
        )
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    trace = Trace(nodes=nodes, jobs=tuple(jobs), horizon_s=horizon_of(jobs), source=f"openb:{path.name}")
    return trace, OpenbReport(len(rows), dropped, 0 if single_pool else unspecified, fallback)


def load_openb(
    node_file: Path, pod_file: Path, *, single_pool: bool = False, default_model: str | None = None
) -> Trace:
    """Load an openb node list and pod list (see the module docstring for the mapping)."""
    return load_openb_with_report(node_file, pod_file, single_pool=single_pool, default_model=default_model)[
        0
    ]
