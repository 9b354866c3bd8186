"""A columnar job table (numpy arrays): what the generator and the statistics work on.

470k `TraceJob` objects are fine for the simulator, but generating, measuring and writing a
full-scale trace is far faster on arrays; this converts at the edges in both directions.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gfs.services.simulator.traces.gfs_format import JOB_COLUMNS, JOB_FILE, format_number
from gfs.services.simulator.traces.records import Trace, TraceJob


@dataclass(frozen=True, eq=False)
class JobColumns:
    """One entry per job in every array; `model` and `org` index `models` / `orgs`."""

    models: tuple[str, ...]
    orgs: tuple[str, ...]
    model: np.ndarray  # int
    org: np.ndarray  # int
    is_spot: np.ndarray  # bool
    gpu_request: np.ndarray  # float, per worker
    workers: np.ndarray  # int
    cpu_request: np.ndarray  # float
    submit_s: np.ndarray  # float
    duration_s: np.ndarray  # float

    def __len__(self) -> int:
        return int(self.model.shape[0])

    @property
    def gpus(self) -> np.ndarray:
        return np.asarray(self.gpu_request * self.workers, dtype=float)

    def take(self, index: np.ndarray) -> JobColumns:
        """The jobs at `index` (an integer or boolean array), in that order."""
        return JobColumns(
            models=self.models,
            orgs=self.orgs,
            model=self.model[index],
            org=self.org[index],
            is_spot=self.is_spot[index],
            gpu_request=self.gpu_request[index],
            workers=self.workers[index],
            cpu_request=self.cpu_request[index],
            submit_s=self.submit_s[index],
            duration_s=self.duration_s[index],
        )

    def sorted_by_submit(self) -> JobColumns:
        return self.take(np.argsort(self.submit_s, kind="stable"))

    @classmethod
    def from_trace(cls, trace: Trace) -> JobColumns:
        jobs = trace.jobs
        models = tuple(sorted({j.gpu_model for j in jobs} | {n.gpu_model for n in trace.nodes}))
        orgs = tuple(sorted({j.organization for j in jobs}))
        m_index = {m: i for i, m in enumerate(models)}
        o_index = {o: i for i, o in enumerate(orgs)}
        n = len(jobs)

        def col(values: object, dtype: type) -> np.ndarray:
            return np.asarray(np.fromiter(values, dtype=dtype, count=n))  # type: ignore[call-overload]

        return cls(
            models=models,
            orgs=orgs,
            model=col((m_index[j.gpu_model] for j in jobs), np.int64),
            org=col((o_index[j.organization] for j in jobs), np.int64),
            is_spot=col((j.job_class == "SPOT" for j in jobs), np.bool_),
            gpu_request=col((j.gpus_per_worker for j in jobs), np.float64),
            workers=col((j.workers for j in jobs), np.int64),
            cpu_request=col((j.cpu_request for j in jobs), np.float64),
            submit_s=col((j.submit_s for j in jobs), np.float64),
            duration_s=col((j.duration_s for j in jobs), np.float64),
        )

    def job_names(self) -> list[str]:
        return [str(i) for i in range(len(self))]

    def _rows(self) -> Iterator[tuple[str, int, int, float, float, int, float, float, bool]]:
        """(name, org, model, cpu, gpus per worker, workers, submit, duration, is spot) per job, as
        Python scalars (one `tolist` per column is much faster than indexing numpy per row)."""
        return zip(
            self.job_names(),
            self.org.tolist(),
            self.model.tolist(),
            self.cpu_request.tolist(),
            self.gpu_request.tolist(),
            self.workers.tolist(),
            self.submit_s.tolist(),
            self.duration_s.tolist(),
            self.is_spot.tolist(),
            strict=True,
        )

    def to_jobs(self) -> tuple[TraceJob, ...]:
        """Records named by position (`"0"`, `"1"`, ...), in the table's order."""
        return tuple(
            TraceJob(
                name=name,
                organization=self.orgs[o],
                gpu_model=self.models[m],
                cpu_request=float(c),
                gpus_per_worker=float(g),
                workers=int(w),
                submit_s=float(s),
                duration_s=float(d),
                job_class="SPOT" if spot else "HP",
            )
            for name, o, m, c, g, w, s, d, spot in self._rows()
        )

    def write_job_csv(self, out_dir: Path) -> None:
        """Write `job_info_df.csv` (the GFS format) straight from the arrays."""
        f = format_number
        with (Path(out_dir) / JOB_FILE).open("w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh, lineterminator="\n")
            out.writerow(JOB_COLUMNS)
            out.writerows(
                (name, self.orgs[o], self.models[m], f(c), f(g), w, f(s), f(d), "Spot" if spot else "HP")
                for name, o, m, c, g, w, s, d, spot in self._rows()
            )
