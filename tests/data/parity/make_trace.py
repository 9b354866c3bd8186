"""Generate the sim/live parity trace (stdlib only): `python tests/data/parity/make_trace.py [OUT_DIR]`.

Writes `node_info_df.csv` and `job_info_df.csv` (GFS format with this project's optional columns
checkpoint_interval, guarantee_hours, cancel_time) to OUT_DIR (default: this script's folder).
Deterministic: the same SEED writes byte-identical files (tests/sim/test_sim_parity_trace.py checks
that the committed files are this script's output).

The shape (see README.md): two pools, 5 nodes x 4 GPUs (A100) and 3 nodes x 2 GPUs (A10); HP
tasks in both pools from t = 0; spot tasks (whole, fractional, gangs) fill the idle GPUs in waves
and HP bursts (whole, fractional, a gang) come on top of them, so HP must preempt; three
cancellations (a running HP task, a spot gang that cannot be placed while it waits, a running
spot task). Every time is a multiple of 20 s and everything ends within 3 hours.
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

SEED = 8
TICK_S = 20  # every time in the trace is a multiple of this
POOL_A, POOL_B = "A100", "A10"
NODES = [(f"n{i}", POOL_A, 4, 64) for i in range(5)] + [(f"n{i}", POOL_B, 2, 32) for i in range(5, 8)]
ORGS = ("org-a", "org-b", "org-c")
CHECKPOINTS_S = (600, 900, 1200, 1800)
HEADER = (
    "job_name", "organization", "gpu_model", "cpu_request", "gpu_request", "worker_num", "submit_time",
    "duration", "job_type", "checkpoint_interval", "guarantee_hours", "cancel_time",
)  # fmt: skip


def ticks(rng: random.Random, lo_s: int, hi_s: int) -> int:
    """A multiple of TICK_S in [lo_s, hi_s]."""
    return TICK_S * rng.randint(lo_s // TICK_S, hi_s // TICK_S)


def make_jobs(seed: int = SEED) -> list[dict[str, object]]:
    rng = random.Random(seed)
    jobs: list[dict[str, object]] = []

    def add(name: str, pool: str, cls: str, gpus: float, workers: int, submit: int, duration: int, *,
            ckpt: int | None = None, hours: int = 1, cancel: int | None = None) -> None:  # fmt: skip
        for value in (submit, duration, ckpt or 0, cancel or 0):
            assert value % TICK_S == 0, (name, value)
        jobs.append({
            "job_name": name, "organization": rng.choice(ORGS), "gpu_model": pool,
            "cpu_request": 4 * workers, "gpu_request": gpus, "worker_num": workers, "submit_time": submit,
            "duration": duration, "job_type": cls, "checkpoint_interval": ckpt, "guarantee_hours": hours,
            "cancel_time": cancel,
        })  # fmt: skip

    def spot_wave(pool: str, shapes: list[tuple[float, int]], gpus_budget: float, lo: int, hi: int,
                  dur_lo: int, dur_hi: int) -> None:  # fmt: skip
        """Spot tasks submitted in [lo, hi] until they ask for `gpus_budget` GPUs in all."""
        asked = 0.0
        while asked < gpus_budget:
            gpus, workers = rng.choice(shapes)
            submit, duration = ticks(rng, lo, hi), ticks(rng, dur_lo, dur_hi)
            ckpt, hours = rng.choice(CHECKPOINTS_S), rng.choice((1, 1, 2))
            add(f"sp-{len(jobs):02d}", pool, "Spot", gpus, workers, submit, duration, ckpt=ckpt, hours=hours)
            asked += gpus * workers

    def hp_bursts(pool: str, tag: str, shapes: list[tuple[float, int]], count: int, lo: int, hi: int,
                  dur_lo: int, dur_hi: int) -> None:  # fmt: skip
        for i in range(count):
            gpus, workers = rng.choice(shapes)
            submit, duration = ticks(rng, lo, hi), ticks(rng, dur_lo, dur_hi)
            add(f"hp-{tag}-{i:02d}", pool, "HP", gpus, workers, submit, duration)

    # HP services from t = 0 in both pools; the A10 one is cancelled while it runs.
    add("hp-a-base", POOL_A, "HP", 4, 1, 0, 5400)
    add("hp-a-frac", POOL_A, "HP", 0.5, 1, 0, 3600)
    add("hp-b-base", POOL_B, "HP", 1, 1, 0, 5400, cancel=2400)
    add("hp-b-frac", POOL_B, "HP", 0.25, 1, 0, 3600)
    # A spot task cancelled while it runs (it starts at once in the empty A100 capacity).
    add("sp-a-cancel", POOL_A, "Spot", 1, 1, 20, 3600, ckpt=900, cancel=1200)

    shapes_a = [(1, 1), (2, 1), (4, 1), (2, 2), (0.5, 1), (0.25, 1), (1, 2)]
    shapes_b = [(1, 1), (0.5, 1), (0.25, 1), (1, 2)]
    # Hour 0: spot fills what HP leaves idle (no demand history yet: quota = capacity - HP now),
    # then HP bursts (whole GPUs, fractions, gangs) arrive on a full pool and must preempt.
    spot_wave(POOL_A, shapes_a, 14, 0, 300, 1200, 2400)
    spot_wave(POOL_B, shapes_b, 4, 0, 300, 1200, 2400)
    hp_bursts(POOL_A, "a", [(2, 1), (1, 1), (0.5, 1), (4, 1), (2, 2), (0.25, 1)], 10, 600, 3000, 600, 1200)
    hp_bursts(POOL_B, "b", [(1, 1), (0.5, 1), (0.25, 1)], 5, 600, 3000, 600, 1200)
    # A spot gang asking for every A10 GPU while HP holds some: it waits and is cancelled.
    add("sp-b-gang", POOL_B, "Spot", 2, 3, 1200, 1800, ckpt=600, cancel=1800)
    # A second, smaller spot wave into what the bursts leave.
    spot_wave(POOL_A, shapes_a, 4, 1200, 2400, 1200, 2400)
    spot_wave(POOL_B, shapes_b, 1, 1200, 2400, 1200, 2400)
    jobs.sort(key=lambda j: (int(j["submit_time"]), str(j["job_name"])))  # type: ignore[call-overload]
    return jobs


def number(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def write(out_dir: Path, seed: int = SEED) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "node_info_df.csv").open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(("gpu_model", "gpu_capacity_num", "cpu_num", "node_name"))
        out.writerows((pool, gpus, cpus, name) for name, pool, gpus, cpus in NODES)
    with (out_dir / "job_info_df.csv").open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(HEADER)
        for job in make_jobs(seed):
            row = {**job, "guarantee_hours": None if job["guarantee_hours"] == 1 else job["guarantee_hours"]}
            out.writerow(number(row[c]) for c in HEADER)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
