"""Property tests: any valid payload survives model -> bytes -> model unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from gfs.schemas.commands import EvictCommand
from gfs.schemas.envelope import wrap
from gfs.schemas.forecast import DemandForecast, HourlyDemand
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass, TaskStarted, TaskSubmitted
from gfs.schemas.telemetry import GpuAllocation, GpuProcess, GpuSample, NodeTelemetry
from gfs.schemas.topics import decode, encode, topic_for_event_type

ids = st.from_regex(r"[a-z][a-z0-9\-]{0,20}[a-z0-9]", fullmatch=True)
finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
offsets = st.integers(min_value=-12 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
instants = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=offsets)
gpu_requests = st.one_of(
    st.floats(min_value=0.01, max_value=1.0, allow_nan=False),
    st.integers(min_value=1, max_value=64).map(float),
)
# Any text but control characters (refused by the contract since issue 22; TAB, LF, CR allowed).
_command_text = st.text(
    st.characters(exclude_categories=("Cc", "Cs")) | st.sampled_from("\t\n\r"), min_size=1
)
commands = st.one_of(
    _command_text.filter(lambda t: len(t) <= 40), st.lists(_command_text, min_size=1, max_size=4)
)

submissions = st.builds(
    TaskSubmitted,
    task_id=ids,
    tenant=ids,
    gpu_model=ids,
    gpus_per_worker=gpu_requests,
    workers=st.integers(min_value=1, max_value=128),
    task_class=st.sampled_from(TaskClass),
    guarantee_hours=st.sampled_from([1, 2, 4]),
    expected_duration_s=st.none() | st.floats(min_value=1, max_value=1e8),
    checkpoint_interval_s=st.none() | st.floats(min_value=1, max_value=1e5),
    command=commands,
)


@st.composite
def gpu_samples(draw: st.DrawFn, index: int) -> GpuSample:
    total = draw(st.floats(min_value=1, max_value=200_000))
    share = draw(st.integers(min_value=0, max_value=4))
    return GpuSample(
        index=index,
        utilisation_pct=draw(st.floats(min_value=0, max_value=100)),
        memory_used_mib=draw(st.floats(min_value=0, max_value=total)),
        memory_total_mib=total,
        processes=tuple(
            GpuProcess(pid=pid, task_id=draw(st.none() | ids), used_memory_mib=draw(finite))
            for pid in draw(st.lists(st.integers(0, 2**22), max_size=3, unique=True))
        ),
        allocations=tuple(GpuAllocation(task_id=f"t{i}", fraction=1 / share) for i in range(share)),
    )


@st.composite
def telemetry(draw: st.DrawFn) -> NodeTelemetry:
    count = draw(st.integers(min_value=1, max_value=8))
    return NodeTelemetry(
        node=draw(ids),
        gpu_model=draw(ids),
        sampled_at=draw(instants),
        gpus=tuple(draw(gpu_samples(i)) for i in range(count)),
    )


@st.composite
def forecasts(draw: st.DrawFn) -> DemandForecast:
    hours = draw(st.integers(min_value=1, max_value=6))
    horizon = []
    for hour in range(1, hours + 1):
        mean = draw(st.floats(min_value=-10, max_value=1e4))
        std = draw(st.floats(min_value=0, max_value=1e3))
        horizon.append(
            HourlyDemand(
                hour_ahead=hour, mean=mean, std=std, quantiles={"0.5": mean, "0.9": mean + 1.2816 * std}
            )
        )
    return DemandForecast(
        pool=draw(ids),
        tenant=draw(ids),
        origin_time=draw(instants),
        horizon=tuple(horizon),
        model_name="orglinear",
        model_version=draw(ids),
        fallback=draw(st.booleans()),
    )


@st.composite
def starts(draw: st.DrawFn) -> TaskStarted:
    workers = draw(st.integers(min_value=1, max_value=4))
    return TaskStarted(
        task_id=draw(ids),
        pool=draw(ids),
        task_class=draw(st.sampled_from(TaskClass)),
        placements=tuple(
            Placement(
                worker_index=w,
                node=draw(ids),
                gpu_indices=tuple(draw(st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True))),
                gpu_fraction=draw(st.floats(min_value=0.01, max_value=1)),
            )
            for w in range(workers)
        ),
        started_at=draw(instants),
        attempt=draw(st.integers(min_value=1, max_value=50)),
    )


evictions = st.builds(
    EvictCommand,
    command_id=st.uuids(version=4),
    node=ids,
    task_ids=st.lists(ids, min_size=1, max_size=5, unique=True).map(tuple),
    reason=st.sampled_from(EvictionReason),
    grace_seconds=st.floats(min_value=0, max_value=600),
    preemptor_task_id=st.none() | ids,
    issued_at=instants,
    signature=st.text(alphabet="0123456789abcdef", max_size=64),
)


@given(
    payload=st.one_of(submissions, telemetry(), forecasts(), starts(), evictions),
    at=instants,
    event_id=st.uuids(),
)
def test_any_valid_payload_round_trips(payload: object, at: datetime, event_id: UUID) -> None:
    env = wrap(payload, producer="property-test", occurred_at=at)  # type: ignore[type-var]
    env = env.model_copy(update={"event_id": event_id})
    decoded = decode(topic_for_event_type(env.event_type).name, encode(env))
    assert decoded == env
    assert decoded.occurred_at.tzinfo is UTC
