"""The demo's accelerated clock plays the sample's instants as planned (hand-worked)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from gfs.services.demo.clock import plan
from gfs.services.simulator.traces.records import TraceJob


def _job(name: str, submit_s: float) -> TraceJob:
    return TraceJob(
        name=name, organization="7", gpu_model="H800", cpu_request=1.0, gpus_per_worker=1.0, workers=1,
        submit_s=submit_s, duration_s=60.0, job_class="HP",
    )  # fmt: skip


def test_jobs_are_submitted_at_the_first_instant_at_or_after_their_time_and_status_per_period() -> None:
    jobs = [_job("d", 600.0), _job("a", 0.0), _job("c", 250.0), _job("b", 100.0)]
    got = [
        (i.at_s, [j.name for j in i.submit], i.status)
        for i in plan(jobs, step_s=240.0, status_every_s=300.0, end_s=700.0)
    ]
    # t = 0: a (STATUS: the first period); 240: b (period 0 again: no STATUS); 480: c (period 1);
    # 720: d (period 2), and 720 >= the end with nothing left: the plan ends there.
    assert got == [
        (0.0, ["a"], True),
        (240.0, ["b"], False),
        (480.0, ["c"], True),
        (720.0, ["d"], True),
    ]


def test_the_plan_runs_to_the_sample_end_even_after_the_last_submission() -> None:
    got = [(i.at_s, len(i.submit), i.status) for i in plan([_job("a", 0.0)], step_s=100.0,
                                                         status_every_s=150.0, end_s=250.0)]  # fmt: skip
    # periods: 0 -> 0, 100 -> 0, 200 -> 1, 300 -> 2 (the first instant at or after the end)
    assert got == [(0.0, 1, True), (100.0, 0, False), (200.0, 0, True), (300.0, 0, True)]


def test_a_clock_that_does_not_move_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        next(plan([], step_s=0.0, status_every_s=300.0, end_s=10.0))


class _Producer:
    sent: ClassVar[list[tuple[str, float]]] = []

    def __init__(self, **_: object) -> None:
        _Producer.sent = []

    async def __aenter__(self) -> _Producer:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def send(self, topic: str, envelope: object) -> None:
        tick = envelope.payload  # type: ignore[attr-defined]
        _Producer.sent.append((f"{tick.phase}", tick.at.timestamp() - BASE))


class _Client(_Producer):
    submitted: ClassVar[list[tuple[str, float]]] = []

    def __init__(self, *, now: object, **_: object) -> None:
        self.now = now
        _Client.submitted = []

    async def submit(self, task: object) -> None:
        _Client.submitted.append((str(task), self.now().timestamp() - BASE))  # type: ignore[operator]


BASE = 1767225600.0


async def test_the_clock_plays_advance_submissions_status_pass_and_waits_for_its_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import gfs.services.platform.kafka.producer as producer_module
    import gfs.services.producers.client as client_module
    from gfs.services.demo.clock import ClockState, run_clock

    monkeypatch.setattr(producer_module, "EnvelopeProducer", _Producer)
    monkeypatch.setattr(client_module, "GfsClient", _Client)
    stop = asyncio.Event()
    asked: list[float] = []

    async def gate(t: float) -> bool:
        # Refuses t = 240 twice (the forecast lags), then lets it through; stops after t = 480.
        asked.append(t)
        if t > 480:
            stop.set()
            return False
        return not (t == 240 and asked.count(240) <= 2)

    state = ClockState()
    await run_clock(
        name="c", base_s=BASE, jobs=[_job("a", 0.0), _job("b", 100.0)], end_s=400.0, step_s=240.0,
        period_s=0.01, status_every_s=300.0, bootstrap="x", to_task=lambda j: j.name, state=state,
        stop=stop, gate=gate,
    )  # fmt: skip
    assert _Producer.sent == [
        ("ADVANCE", 0.0), ("STATUS", 0.0), ("PASS", 0.0),
        ("ADVANCE", 240.0), ("PASS", 240.0),
        ("ADVANCE", 480.0), ("STATUS", 480.0), ("PASS", 480.0),
    ]  # fmt: skip
    assert _Client.submitted == [("a", 0.0), ("b", 240.0)]  # stamped with the clock's time
    assert asked == [0.0, 240.0, 240.0, 240.0, 480.0, 720.0]
    assert state.held_s >= 0.15 and state.at_s == 480.0 and state.submitted == 2 and state.done
