"""`gfs replay`: publish a GFS-format trace's submissions to the live pipeline in scaled time.

Each trace job becomes one `TaskSubmitted` on gfs.tasks.submit (through `GfsClient`, so it carries
the registry key and a trace header), sent at its submit time divided by `--speed`, counted from
the first replayed job (which is sent at once). Field mapping, trace job -> TaskSubmitted:

| trace (job_info_df.csv)      | TaskSubmitted                                                  |
|------------------------------|----------------------------------------------------------------|
| task_prefix + job_name       | task_id (the prefix keeps ids unique across runs)              |
| organization                 | tenant                                                         |
| gpu_model                    | gpu_model (the pool)                                           |
| gpu_request                  | gpus_per_worker (per worker, as in the trace; may be < 1)      |
| worker_num                   | workers                                                        |
| job_type HP / Spot           | task_class HP / SPOT                                           |
| (none in the format)         | guarantee_hours: the reader's default, 1 h (SPOT only)         |
| duration (trace seconds)     | expected_duration_s (unscaled; absent when the duration is 0)  |
| (none in the format)         | checkpoint_interval_s: `--checkpoint-interval` when given      |
| duration / speed             | command: `gfs fake-task --duration <duration/speed>`           |
| checkpoint interval / speed  | ... `--checkpoint-s <interval/speed>` when one is given        |

The command's program is `--gfs-program` (default `gfs`): the node agent runs it, so it must name
the `gfs` executable *on the agent's machine*; with agents on the same machine as a virtual
environment that is not on PATH, pass the venv's own, e.g. `--gfs-program "$(which gfs)"`.
`cpu_request` has no field in the wire contract and is not sent.

A job whose fields the wire contract refuses (an empty organization, 1.5 GPUs per worker, a job name
with surrounding blanks) is skipped with its reason and reported in the summary; a file that is not a GFS
trace at all (the reader's `TraceFormatError`) stops the command before anything is published.
Only `job_info_df.csv` is read: the live cluster's nodes come from its agents, not from the trace,
and jobs on GPU models the cluster lacks are the scheduler's to reject (UNKNOWN_GPU_MODEL).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.services.simulator.traces.gfs_format import JOB_FILE, format_number, read_jobs
from gfs.services.simulator.traces.records import TraceJob


@dataclass(frozen=True, slots=True)
class PlannedSubmission:
    """One submission of the plan: when to send it (wall seconds after the replay starts)."""

    offset_s: float
    trace_submit_s: float
    task: TaskSubmitted


@dataclass(frozen=True, slots=True)
class SkippedJob:
    job_name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    submissions: tuple[PlannedSubmission, ...]
    skipped: tuple[SkippedJob, ...]


@dataclass(slots=True)
class ReplayStats:
    published: int = 0
    wall_s: float = 0.0
    max_lag_s: float = 0.0  # how late the worst send was against its scheduled time
    sent_at: list[float] = field(default_factory=list)  # wall offsets of each send (for tests)

    @property
    def rate_per_s(self) -> float:
        return self.published / self.wall_s if self.wall_s > 0 else 0.0


def _scaled(seconds: float, speed: float) -> str:
    return format_number(round(seconds / speed, 3))


def fake_task_command(
    duration_s: float, *, speed: float, gfs_program: str = "gfs", checkpoint_interval_s: float | None = None
) -> tuple[str, ...]:
    """`gfs fake-task --duration <duration/speed>` (seconds, rounded to the millisecond), plus
    `--checkpoint-s <interval/speed>` when the task has a checkpoint interval."""
    command: tuple[str, ...] = (gfs_program, "fake-task", "--duration", _scaled(duration_s, speed))
    if checkpoint_interval_s is not None:
        command += ("--checkpoint-s", _scaled(checkpoint_interval_s, speed))
    return command


def job_to_submission(
    job: TraceJob,
    *,
    speed: float,
    task_prefix: str = "",
    gfs_program: str = "gfs",
    checkpoint_interval_s: float | None = None,
) -> TaskSubmitted:
    """The TaskSubmitted for one trace job (see the module's mapping table). Raises
    `pydantic.ValidationError` when the wire contract refuses a field."""
    return TaskSubmitted.model_validate(
        {
            "task_id": f"{task_prefix}{job.name}",
            "tenant": job.organization,
            "gpu_model": job.gpu_model,
            "gpus_per_worker": job.gpus_per_worker,
            "workers": job.workers,
            "task_class": TaskClass.HP if job.job_class == "HP" else TaskClass.SPOT,
            "guarantee_hours": job.guarantee_hours,
            "expected_duration_s": job.duration_s if job.duration_s > 0 else None,
            "checkpoint_interval_s": checkpoint_interval_s,
            "command": fake_task_command(
                job.duration_s,
                speed=speed,
                gfs_program=gfs_program,
                checkpoint_interval_s=checkpoint_interval_s,
            ),
        }
    )


def describe_validation_error(exc: ValidationError) -> str:
    """One line per refused field, e.g. "tenant: String should have at least 1 character"."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'task'}: {error['msg']}" for error in exc.errors()
    )


def plan_replay(
    jobs: Iterable[TraceJob],
    *,
    speed: float,
    start_at_s: float = 0.0,
    limit: int | None = None,
    task_prefix: str = "",
    gfs_program: str = "gfs",
    checkpoint_interval_s: float | None = None,
) -> ReplayPlan:
    """Map the jobs submitted at or after `start_at_s` (trace seconds), in (submit time, name)
    order, to submissions; at most `limit` are planned (skipped jobs do not count). Offsets are
    `(submit_s - first planned submit_s) / speed`, so the first is sent at once."""
    if not speed > 0:
        raise ValueError(f"speed must be > 0 (got {speed})")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 (got {limit})")
    planned: list[tuple[float, TaskSubmitted]] = []
    skipped: list[SkippedJob] = []
    for job in sorted(jobs, key=lambda j: (j.submit_s, j.name)):
        if limit is not None and len(planned) >= limit:
            break
        if job.submit_s < start_at_s:
            continue
        try:
            task = job_to_submission(
                job, speed=speed, task_prefix=task_prefix, gfs_program=gfs_program,
                checkpoint_interval_s=checkpoint_interval_s,
            )  # fmt: skip
        except ValidationError as exc:
            skipped.append(SkippedJob(job.name, describe_validation_error(exc)))
            continue
        planned.append((job.submit_s, task))
    origin = planned[0][0] if planned else 0.0
    submissions = tuple(PlannedSubmission((s - origin) / speed, s, task) for s, task in planned)
    return ReplayPlan(submissions=submissions, skipped=tuple(skipped))


async def run_replay(
    submissions: Sequence[PlannedSubmission],
    publish: Callable[[TaskSubmitted], Awaitable[object]],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    on_published: Callable[[PlannedSubmission], None] | None = None,
) -> ReplayStats:
    """Send each submission at `start + offset_s` (in order; one at a time, each awaited until the
    broker acked it). A send that falls behind its schedule goes at once, and later ones keep
    their own times, so a slow broker delays the replay without compressing it further."""
    stats = ReplayStats()
    start = clock()
    for item in submissions:
        delay = start + item.offset_s - clock()
        if delay > 0:
            await sleep(delay)
        sent = clock() - start
        stats.max_lag_s = max(stats.max_lag_s, sent - item.offset_s)
        await publish(item.task)
        stats.sent_at.append(sent)
        stats.published += 1
        if on_published is not None:
            on_published(item)
    stats.wall_s = clock() - start
    return stats


def load_jobs(trace_dir: Path) -> tuple[TraceJob, ...]:
    """The jobs of a GFS-format trace directory (its job_info_df.csv), validated by the reader."""
    return read_jobs(Path(trace_dir) / JOB_FILE)


# -- the command -----------------------------------------------------------------------------------


def replay(
    trace: Annotated[Path, typer.Option("--trace", help="GFS-format trace directory (job_info_df.csv)")],
    speed: Annotated[float, typer.Option(help="time scale: 60 replays one trace minute per second")] = 1.0,
    limit: Annotated[int | None, typer.Option(help="publish at most N submissions")] = None,
    start_at: Annotated[
        float, typer.Option("--start-at", help="skip jobs submitted before this trace second")
    ] = 0.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan (one JSON line per task), publish nothing")
    ] = False,
    task_prefix: Annotated[
        str, typer.Option("--task-prefix", help="prepended to each job name (unique ids across runs)")
    ] = "",
    gfs_program: Annotated[
        str, typer.Option("--gfs-program", help="the gfs executable as the node agents will run it")
    ] = "gfs",
    checkpoint_interval: Annotated[
        float | None,
        typer.Option("--checkpoint-interval", help="checkpoint_interval_s to send (trace seconds)"),
    ] = None,
) -> None:
    """Publish a GFS-format trace's task submissions to gfs.tasks.submit in scaled time."""
    from gfs.services.simulator.traces.gfs_format import TraceFormatError

    console = Console(stderr=True)
    if not speed > 0:
        raise typer.BadParameter("--speed must be > 0")
    if limit is not None and limit < 0:
        raise typer.BadParameter("--limit must be >= 0")
    if checkpoint_interval is not None and not checkpoint_interval > 0:
        raise typer.BadParameter("--checkpoint-interval must be > 0")
    try:
        jobs = load_jobs(trace)
    except TraceFormatError as exc:
        console.print(f"[red]not a readable GFS-format trace:[/red] {exc}")
        raise typer.Exit(2) from exc
    plan = plan_replay(
        jobs, speed=speed, start_at_s=start_at, limit=limit, task_prefix=task_prefix,
        gfs_program=gfs_program, checkpoint_interval_s=checkpoint_interval,
    )  # fmt: skip
    if dry_run:
        for item in plan.submissions:
            typer.echo(
                json.dumps({"at_s": round(item.offset_s, 3), "task": item.task.model_dump(mode="json")})
            )
        _print_summary(console, plan, None, published_label="planned (dry run)")
        return
    stats = asyncio.run(_publish(plan, console))
    _print_summary(console, plan, stats, published_label="published")


async def _publish(plan: ReplayPlan, console: Console) -> ReplayStats:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gfs.services.platform.settings import PlatformSettings
    from gfs.services.platform.tracing import build_tracer_provider
    from gfs.services.producers.client import GfsClient
    from gfs.services.producers.errors import KafkaUnavailableError

    settings = PlatformSettings()
    provider = build_tracer_provider(settings)
    progress = Progress(
        TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(), console=console, transient=False,
    )  # fmt: skip
    bar = progress.add_task("replay", total=len(plan.submissions), last="")

    def advance(item: PlannedSubmission) -> None:
        progress.update(bar, advance=1, last=item.task.task_id)

    try:
        with progress:
            async with GfsClient(
                bootstrap_servers=settings.bootstrap_servers, producer_name="gfs-replay",
                client_id="gfs-replay", tracer_provider=provider, security=settings.kafka_security,
            ) as client:  # fmt: skip
                return await run_replay(plan.submissions, client.submit, on_published=advance)
    except KafkaUnavailableError as exc:
        console.print(f"[red]Kafka unavailable:[/red] {exc}")
        raise typer.Exit(1) from exc
    finally:
        provider.shutdown()


def _print_summary(
    console: Console, plan: ReplayPlan, stats: ReplayStats | None, *, published_label: str
) -> None:
    from rich.table import Table

    table = Table(title="gfs replay", show_header=False)
    table.add_row(published_label, f"{len(plan.submissions) if stats is None else stats.published:,}")
    table.add_row("skipped (invalid)", f"{len(plan.skipped):,}")
    if plan.submissions:
        first, last = plan.submissions[0], plan.submissions[-1]
        table.add_row("trace span", f"{last.trace_submit_s - first.trace_submit_s:,.0f} s")
        table.add_row("scheduled wall span", f"{plan.submissions[-1].offset_s:,.3f} s")
    if stats is not None:
        table.add_row("wall time", f"{stats.wall_s:,.3f} s")
        table.add_row("achieved rate", f"{stats.rate_per_s:,.1f} submissions/s")
        table.add_row("worst lag behind schedule", f"{stats.max_lag_s:,.3f} s")
    console.print(table)
    for skip in plan.skipped[:20]:
        console.print(f"  skipped {skip.job_name}: {skip.reason}")
    if len(plan.skipped) > 20:
        console.print(f"  ... and {len(plan.skipped) - 20} more skipped")
