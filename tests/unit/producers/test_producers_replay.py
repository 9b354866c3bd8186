"""`gfs replay`: trace job -> TaskSubmitted mapping, the scaled schedule, the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gfs.schemas.tasks import TaskClass
from gfs.services.cli import build_app
from gfs.services.producers.replay import (
    PlannedSubmission,
    fake_task_command,
    job_to_submission,
    plan_replay,
    run_replay,
)
from gfs.services.simulator.traces.records import TraceJob


def job(name: str, submit_s: float, **overrides: object) -> TraceJob:
    fields: dict[str, object] = {
        "name": name, "organization": "org-a", "gpu_model": "A100-SXM4-80GB", "cpu_request": 8.0,
        "gpus_per_worker": 8.0, "workers": 2, "submit_s": submit_s, "duration_s": 7200.0,
        "job_class": "SPOT",
    }  # fmt: skip
    fields.update(overrides)
    return TraceJob(**fields)  # type: ignore[arg-type]


def test_a_spot_job_maps_field_by_field() -> None:
    task = job_to_submission(job("j1", 10.0, guarantee_hours=2), speed=100.0, task_prefix="run7-")
    assert task.task_id == "run7-j1"
    assert task.tenant == "org-a"
    assert task.gpu_model == "A100-SXM4-80GB"
    assert task.gpus_per_worker == 8.0
    assert task.workers == 2
    assert task.task_class is TaskClass.SPOT
    assert task.guarantee_hours == 2
    assert task.expected_duration_s == 7200.0  # the trace's duration, not scaled
    assert task.checkpoint_interval_s is None  # the GFS format has no such column
    assert task.command == ("gfs", "fake-task", "--duration", "72")  # 7200 s / 100


def test_an_hp_job_with_a_fractional_gpu_and_a_checkpoint_interval() -> None:
    task = job_to_submission(
        job("j2", 0.0, job_class="HP", gpus_per_worker=0.5, workers=1, duration_s=100.0),
        speed=3.0, gfs_program="/opt/venv/bin/gfs", checkpoint_interval_s=600.0,
    )  # fmt: skip
    assert task.task_class is TaskClass.HP
    assert task.gpus_per_worker == 0.5
    assert task.checkpoint_interval_s == 600.0
    assert task.command == ("/opt/venv/bin/gfs", "fake-task", "--duration", "33.333", "--checkpoint-s", "200")


def test_a_zero_duration_job_sends_no_estimate() -> None:
    task = job_to_submission(job("j3", 0.0, duration_s=0.0), speed=1.0)
    assert task.expected_duration_s is None
    assert task.command[-1] == "0"


def test_fake_task_command_scales_and_rounds_to_the_millisecond() -> None:
    assert fake_task_command(3600.0, speed=1.0) == ("gfs", "fake-task", "--duration", "3600")
    assert fake_task_command(1.0, speed=7.0)[-1] == "0.143"


def test_plan_skips_invalid_jobs_with_their_reasons_and_orders_by_submit_time() -> None:
    jobs = [
        job("late", 500.0),
        job("no-org", 150.0, organization=""),
        job("first", 100.0),
        job("odd-gpus", 120.0, gpus_per_worker=1.5),
        job("padded ", 130.0),
        job("second", 160.0),
    ]
    plan = plan_replay(jobs, speed=10.0)
    assert [s.task.task_id for s in plan.submissions] == ["first", "second", "late"]
    assert [s.offset_s for s in plan.submissions] == [0.0, 6.0, 40.0]  # (submit - 100) / 10
    assert [s.trace_submit_s for s in plan.submissions] == [100.0, 160.0, 500.0]
    reasons = {skip.job_name: skip.reason for skip in plan.skipped}
    assert reasons.keys() == {"no-org", "odd-gpus", "padded "}
    assert reasons["no-org"].startswith("tenant:")
    assert "gpus_per_worker" in reasons["odd-gpus"] and "whole number" in reasons["odd-gpus"]
    assert reasons["padded "].startswith("task_id:")


def test_plan_start_at_and_limit() -> None:
    jobs = [job(f"j{i}", 100.0 * i) for i in range(10)]
    plan = plan_replay(jobs, speed=2.0, start_at_s=250.0, limit=3)
    assert [s.task.task_id for s in plan.submissions] == ["j3", "j4", "j5"]
    assert [s.offset_s for s in plan.submissions] == [0.0, 50.0, 100.0]  # relative to j3, / 2
    assert plan_replay(jobs, speed=1.0, limit=0).submissions == ()
    with pytest.raises(ValueError, match="speed"):
        plan_replay(jobs, speed=0.0)


class FakeTime:
    """A clock that only moves when slept on, or when a publish takes time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_run_replay_sends_each_submission_at_its_scaled_time() -> None:
    plan = plan_replay([job("a", 50.0), job("b", 50.0), job("c", 80.0), job("d", 350.0)], speed=10.0)
    fake = FakeTime()
    published: list[tuple[str, float]] = []

    async def publish(task: object) -> None:
        published.append((task.task_id, fake.now - 1000.0))  # type: ignore[attr-defined]

    stats = await run_replay(plan.submissions, publish, clock=fake.clock, sleep=fake.sleep)
    assert published == [("a", 0.0), ("b", 0.0), ("c", 3.0), ("d", 30.0)]
    assert fake.sleeps == [3.0, 27.0]  # no sleep for the first or for a simultaneous one
    assert stats.published == 4
    assert stats.wall_s == 30.0
    assert stats.max_lag_s == 0.0
    assert stats.rate_per_s == pytest.approx(4 / 30.0)


async def test_a_slow_publish_delays_later_sends_without_compressing_their_schedule() -> None:
    plan = plan_replay([job(n, t) for n, t in [("a", 0.0), ("b", 1.0), ("c", 10.0)]], speed=1.0)
    fake = FakeTime(start=0.0)

    async def slow_publish(task: object) -> None:
        fake.now += 4.0  # each ack takes 4 s

    seen: list[PlannedSubmission] = []
    stats = await run_replay(
        plan.submissions, slow_publish, clock=fake.clock, sleep=fake.sleep, on_published=seen.append
    )
    assert stats.sent_at == [0.0, 4.0, 10.0]  # b went 3 s late; c still at its own time
    assert stats.max_lag_s == 3.0
    assert fake.sleeps == [2.0]
    assert [s.task.task_id for s in seen] == ["a", "b", "c"]


def write_trace(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "node_info_df.csv").write_text(
        "gpu_model,gpu_capacity_num,cpu_num,node_name\nA100,8,96,n1\n", encoding="utf-8"
    )
    (directory / "job_info_df.csv").write_text(
        "job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type\n"
        "j1,org-a,A100,8,1,2,100,3600,HP\n"
        "j2,org-b,A100,4,0.5,1,160,600,Spot\n"
        "j3,,A100,4,1,1,130,60,Spot\n",
        encoding="utf-8",
    )
    return directory


def test_dry_run_prints_the_plan_and_publishes_nothing(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "trace")
    # An unreachable broker: a dry run must not even try to connect.
    result = CliRunner().invoke(
        build_app(),
        ["replay", "--trace", str(trace), "--speed", "60", "--dry-run", "--task-prefix", "x-"],
        env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(line["at_s"], line["task"]["task_id"]) for line in lines] == [(0.0, "x-j1"), (1.0, "x-j2")]
    assert lines[0]["task"]["command"] == ["gfs", "fake-task", "--duration", "60"]
    assert "skipped j3: tenant" in result.output


def test_a_file_that_is_not_a_trace_is_refused_before_publishing(tmp_path: Path) -> None:
    (tmp_path / "job_info_df.csv").write_text("job_name,organization\nj1,org-a\n", encoding="utf-8")
    result = CliRunner().invoke(build_app(), ["replay", "--trace", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2
    assert "missing column" in result.output
