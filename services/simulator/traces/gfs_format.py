"""The GFS trace format (Alibaba cluster-trace-v2026-spot-gpu): `node_info_df.csv` + `job_info_df.csv`.

Columns, exactly as the release documents them:

* `node_info_df.csv`: gpu_model, gpu_capacity_num, cpu_num, node_name
* `job_info_df.csv`: job_name, organization, gpu_model, cpu_request, gpu_request, worker_num,
  submit_time, duration, job_type (`HP` or `Spot`)

Optional columns of this project (absent, or an empty cell: the default):

* `checkpoint_interval`: seconds between the job's checkpoints, > 0 (default 3600);
* `guarantee_hours`: the spot guarantee the job asks for, 1, 2 or 4 (default 1);
* `cancel_time`: when the job is cancelled, seconds since the trace start, >= its submit_time
  (default: never).

Other extra columns are ignored, so a file written by a newer release still loads. Every row is
validated at this edge, because a bad value (a negative duration, a job on a GPU model that has no
nodes) would otherwise surface much later as a silent mis-simulation. The reader uses the stdlib
`csv` module (pandas is deliberately not a dependency); 470k jobs load in a few seconds.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import gc
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gfs.services.simulator.traces.records import JobClass, Trace, TraceJob, TraceNode

NODE_FILE = "node_info_df.csv"
JOB_FILE = "job_info_df.csv"
NODE_COLUMNS: tuple[str, ...] = ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")
JOB_COLUMNS: tuple[str, ...] = (
    "job_name",
    "organization",
    "gpu_model",
    "cpu_request",
    "gpu_request",
    "worker_num",
    "submit_time",
    "duration",
    "job_type",
)
# This project's optional columns, in the order the writer puts them after JOB_COLUMNS.
OPTIONAL_JOB_COLUMNS: tuple[str, ...] = ("checkpoint_interval", "guarantee_hours", "cancel_time")
DEFAULT_CHECKPOINT_S = 3600.0
DEFAULT_GUARANTEE_HOURS = 1
GUARANTEE_HOURS: tuple[int, ...] = (1, 2, 4)
# The release spells the classes `HP` and `Spot`; case is normalised so hand-edited files load.
_JOB_TYPES: dict[str, JobClass] = {"hp": "HP", "spot": "SPOT"}
_TYPE_NAMES: dict[str, str] = {"HP": "HP", "SPOT": "Spot"}


class TraceFormatError(ValueError):
    """A trace file that cannot be read as the GFS format; the message names the file, row and column."""


class OrphanPolicy(enum.Enum):
    """What to do with jobs whose gpu_model has no node in node_info_df.csv."""

    ERROR = "error"  # refuse the trace (default: such a job could never run, so it is a data error)
    DROP = "drop"  # leave those jobs out and report how many
    KEEP = "keep"  # keep them; the simulator will see them queue forever


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What the loader saw besides the records: counts a user should know about."""

    jobs_read: int
    orphan_jobs_by_model: tuple[tuple[str, int], ...]
    orphans_dropped: int


def _read_rows(path: Path, required: Sequence[str]) -> tuple[dict[str, int], list[list[str]]]:
    if not path.is_file():
        raise TraceFormatError(f"{path}: file not found")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceFormatError(f"{path}: empty file (no header)") from None
        index = {name: i for i, name in enumerate(header)}
        missing = [c for c in required if c not in index]
        if missing:
            raise TraceFormatError(
                f"{path}: missing column(s) {', '.join(missing)}; found {', '.join(header)}"
            )
        return index, [row for row in reader if row]


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(f"{path}:{line}: column {column}: not a number: {text!r}") from None
    if not math.isfinite(value):
        raise TraceFormatError(f"{path}:{line}: column {column}: not finite: {text!r}")
    return value


def _integer(path: Path, line: int, column: str, text: str) -> int:
    value = _number(path, line, column, text)
    if value != int(value):
        raise TraceFormatError(f"{path}:{line}: column {column}: not an integer: {text!r}")
    return int(value)


def read_nodes(path: Path) -> tuple[TraceNode, ...]:
    """Read `node_info_df.csv` (any file with its columns)."""
    index, rows = _read_rows(path, NODE_COLUMNS)
    c_model, c_gpus, c_cpus, c_name = (index[c] for c in NODE_COLUMNS)
    nodes: list[TraceNode] = []
    for line, row in enumerate(rows, start=2):
        gpus = _integer(path, line, "gpu_capacity_num", row[c_gpus])
        if gpus <= 0:
            raise TraceFormatError(f"{path}:{line}: column gpu_capacity_num: must be > 0, got {gpus}")
        cpus = _integer(path, line, "cpu_num", row[c_cpus])
        if cpus < 0:
            raise TraceFormatError(f"{path}:{line}: column cpu_num: must be >= 0, got {cpus}")
        model = row[c_model].strip()
        if not model:
            raise TraceFormatError(f"{path}:{line}: column gpu_model: empty")
        nodes.append(TraceNode(name=row[c_name].strip(), gpu_model=model, gpus=gpus, cpus=cpus))
    names = Counter(n.name for n in nodes)
    duplicated = sorted(n for n, k in names.items() if k > 1)
    if duplicated:
        raise TraceFormatError(f"{path}: duplicate node_name(s): {', '.join(duplicated[:5])}")
    return tuple(nodes)


def _float_column(path: Path, name: str, texts: Sequence[str]) -> np.ndarray:
    """Parse a whole column at C speed; on failure, find and name the first bad row."""
    try:
        values = np.asarray(texts, dtype=np.float64)
    except ValueError:
        for line, text in enumerate(texts, start=2):
            _number(path, line, name, text)
        raise  # unreachable: some row failed above
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise TraceFormatError(f"{path}:{bad[0] + 2}: column {name}: not finite: {texts[bad[0]]!r}")
    return values


def _check(path: Path, name: str, texts: Sequence[str], bad: np.ndarray, rule: str) -> None:
    where = np.flatnonzero(bad)
    if where.size:
        i = int(where[0])
        raise TraceFormatError(
            f"{path}:{i + 2}: column {name}: {rule}, got {texts[i]!r} ({where.size} row(s) in all)"
        )


def read_jobs(path: Path) -> tuple[TraceJob, ...]:
    """Read `job_info_df.csv`, validated column by column, sorted by (submit_s, name)."""
    index, rows = _read_rows(path, JOB_COLUMNS)
    optional = [c for c in OPTIONAL_JOB_COLUMNS if c in index]
    width = max(index[c] for c in (*JOB_COLUMNS, *optional)) + 1
    short = [i for i, row in enumerate(rows) if len(row) < width]
    if short:
        line = short[0] + 2
        raise TraceFormatError(f"{path}:{line}: row has {len(rows[short[0]])} fields, expected {width}")
    text = {c: [row[index[c]] for row in rows] for c in JOB_COLUMNS}
    kinds_lower = [t.strip().lower() for t in text["job_type"]]
    unknown = [i for i, k in enumerate(kinds_lower) if k not in _JOB_TYPES]
    if unknown:
        i = unknown[0]
        raise TraceFormatError(
            f"{path}:{i + 2}: column job_type: unknown value {text['job_type'][i]!r} (HP or Spot; "
            f"{len(unknown)} row(s) in all)"
        )
    num = {c: _float_column(path, c, text[c]) for c in (
        "cpu_request", "gpu_request", "worker_num", "submit_time", "duration")}  # fmt: skip
    _check(path, "gpu_request", text["gpu_request"], num["gpu_request"] <= 0, "must be > 0")
    workers = num["worker_num"]
    _check(path, "worker_num", text["worker_num"], (workers < 1) | (workers != np.floor(workers)),
           "must be an integer >= 1")  # fmt: skip
    _check(path, "submit_time", text["submit_time"], num["submit_time"] < 0, "must be >= 0")
    _check(path, "duration", text["duration"], num["duration"] < 0, "must be >= 0 (negative duration)")
    _check(path, "cpu_request", text["cpu_request"], num["cpu_request"] < 0, "must be >= 0")
    names = [t.strip() for t in text["job_name"]]
    if len(set(names)) != len(names):
        counts = Counter(names)
        duplicated = sorted(n for n, k in counts.items() if k > 1)
        raise TraceFormatError(f"{path}: {len(duplicated)} duplicate job_name(s), e.g. {duplicated[:5]}")
    jobs = [
        # Positional in TraceJob field order: keyword calls are measurably slower at 470k rows.
        TraceJob(name, org.strip(), model.strip(), cpu, gpu, int(w), submit, duration, _JOB_TYPES[kind])
        for name, org, model, cpu, gpu, w, submit, duration, kind in zip(
            names,
            text["organization"],
            text["gpu_model"],
            num["cpu_request"].tolist(),
            num["gpu_request"].tolist(),
            workers.tolist(),
            num["submit_time"].tolist(),
            num["duration"].tolist(),
            kinds_lower,
            strict=True,
        )
    ]
    if optional:
        jobs = _with_optional_columns(path, jobs, {c: [row[index[c]] for row in rows] for c in optional})
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    return tuple(jobs)


def _optional_numbers(path: Path, column: str, texts: Sequence[str] | None) -> list[float | None]:
    """One value per row of an optional column: None where the column is absent or the cell empty."""
    if texts is None:
        return []
    return [None if not t.strip() else _number(path, line, column, t) for line, t in enumerate(texts, 2)]


def _with_optional_columns(path: Path, jobs: list[TraceJob], texts: dict[str, list[str]]) -> list[TraceJob]:
    """`jobs` (in file order) with the optional columns' values, each validated."""
    ckpt = _optional_numbers(path, "checkpoint_interval", texts.get("checkpoint_interval"))
    hours = _optional_numbers(path, "guarantee_hours", texts.get("guarantee_hours"))
    cancel = _optional_numbers(path, "cancel_time", texts.get("cancel_time"))
    out: list[TraceJob] = []
    for i, job in enumerate(jobs):
        where = f"{path}:{i + 2}: column"
        c = ckpt[i] if ckpt else None
        if c is not None and c <= 0:
            got = texts["checkpoint_interval"][i]
            raise TraceFormatError(f"{where} checkpoint_interval: must be > 0 seconds, got {got!r}")
        h = hours[i] if hours else None
        if h is not None and h not in GUARANTEE_HOURS:
            got = texts["guarantee_hours"][i]
            raise TraceFormatError(f"{where} guarantee_hours: must be 1, 2 or 4, got {got!r}")
        x = cancel[i] if cancel else None
        if x is not None and x < job.submit_s:
            got = texts["cancel_time"][i]
            raise TraceFormatError(
                f"{where} cancel_time: {got!r} is before the job's submit_time "
                f"{format_number(job.submit_s)} (a job cannot be cancelled before it is submitted)"
            )
        out.append(
            dataclasses.replace(
                job,
                guarantee_hours=DEFAULT_GUARANTEE_HOURS if h is None else int(h),
                checkpoint_interval_s=DEFAULT_CHECKPOINT_S if c is None else c,
                cancel_s=x,
            )
        )
    return out


def horizon_of(jobs: Iterable[TraceJob]) -> float:
    """The trace length: when the last job would end if every job started on submission."""
    return max((j.submit_s + j.duration_s for j in jobs), default=0.0)


def load_gfs_trace_with_report(
    trace_dir: Path, *, orphans: OrphanPolicy = OrphanPolicy.ERROR
) -> tuple[Trace, LoadReport]:
    """Load a GFS-format trace directory and say what was found besides the records."""
    trace_dir = Path(trace_dir)
    nodes = read_nodes(trace_dir / NODE_FILE)
    # Half a million new objects trigger repeated full garbage collections that only find live
    # objects (the load makes no cycles); pausing the collector makes loading several times faster.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        jobs = read_jobs(trace_dir / JOB_FILE)
    finally:
        if was_enabled:
            gc.enable()
    models = {n.gpu_model for n in nodes}
    orphan_counts = Counter(j.gpu_model for j in jobs if j.gpu_model not in models)
    by_model = tuple(sorted(orphan_counts.items()))
    if orphan_counts and orphans is OrphanPolicy.ERROR:
        detail = ", ".join(f"{m}: {k}" for m, k in by_model)
        raise TraceFormatError(
            f"{trace_dir / JOB_FILE}: {sum(orphan_counts.values())} job(s) ask for a gpu_model with no "
            f"node in {NODE_FILE} ({detail}); pass orphans=DROP or KEEP to load anyway"
        )
    kept = jobs
    if orphan_counts and orphans is OrphanPolicy.DROP:
        kept = tuple(j for j in jobs if j.gpu_model in models)
    report = LoadReport(
        jobs_read=len(jobs), orphan_jobs_by_model=by_model, orphans_dropped=len(jobs) - len(kept)
    )
    trace = Trace(nodes=nodes, jobs=kept, horizon_s=horizon_of(kept), source=f"gfs:{trace_dir}")
    return trace, report


def load_gfs_trace(trace_dir: Path, *, orphans: OrphanPolicy = OrphanPolicy.ERROR) -> Trace:
    """Load `node_info_df.csv` + `job_info_df.csv` from `trace_dir` (HP -> "HP", Spot -> "SPOT")."""
    return load_gfs_trace_with_report(trace_dir, orphans=orphans)[0]


def format_number(value: float) -> str:
    """Shortest text that reads back to the same float; integers without a trailing `.0`."""
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def write_nodes(nodes: Iterable[TraceNode], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(NODE_COLUMNS)
        out.writerows((n.gpu_model, n.gpus, n.cpus, n.name) for n in nodes)


def write_gfs_trace(trace: Trace, out_dir: Path) -> None:
    """Write `trace` as a GFS-format directory that `load_gfs_trace` reads back to an equal Trace.

    The optional columns (checkpoint_interval, guarantee_hours, cancel_time) are written only when
    some job differs from their default, and then with an empty cell for each job at the default; a
    trace without them is written with exactly the release's columns.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_nodes(trace.nodes, out_dir / NODE_FILE)
    f = format_number
    jobs = trace.jobs
    cells = {
        "checkpoint_interval": [
            "" if j.checkpoint_interval_s == DEFAULT_CHECKPOINT_S else f(j.checkpoint_interval_s)
            for j in jobs
        ],
        "guarantee_hours": [
            "" if j.guarantee_hours == DEFAULT_GUARANTEE_HOURS else str(j.guarantee_hours) for j in jobs
        ],
        "cancel_time": ["" if j.cancel_s is None else f(j.cancel_s) for j in jobs],
    }
    extra = [c for c in OPTIONAL_JOB_COLUMNS if any(cells[c])]
    with (out_dir / JOB_FILE).open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow((*JOB_COLUMNS, *extra))
        out.writerows(
            (
                j.name,
                j.organization,
                j.gpu_model,
                f(j.cpu_request),
                f(j.gpus_per_worker),
                j.workers,
                f(j.submit_s),
                f(j.duration_s),
                _TYPE_NAMES[j.job_class],
                *(cells[c][i] for c in extra),
            )
            for i, j in enumerate(jobs)
        )
