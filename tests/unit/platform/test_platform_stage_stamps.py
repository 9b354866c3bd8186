"""The stage stamps (services/platform/stage_stamps.py): headers in, stages out."""

from __future__ import annotations

import pytest

from gfs.services.livebench.pipeline.load import BenchState
from gfs.services.livebench.pipeline.stage_report import stage_budget
from gfs.services.platform.stage_stamps import (
    COMMIT_UNKNOWN,
    DECIDED_HEADER,
    RELAYED_HEADER,
    STAGE_NAMES,
    BatchStamps,
    CommitTimes,
    breakdown,
    routed_header,
    routed_stamps,
)


def _relayed(times: CommitTimes, routed: tuple[float, float], batch: tuple[float, float, float],
             committed: float | None, relayed: float) -> tuple[tuple[str, bytes], ...]:  # fmt: skip
    """The headers of a command about task "t" as the decider and the relay leave them."""
    token = times.token()
    stamps = BatchStamps(*batch, routed={"t": routed})
    header = stamps.header("t", token)
    assert header is not None
    if committed is not None:
        times.committed(token, committed)
    return times.restamp((("traceparent", b"x"), header), relayed)


def test_the_stages_are_the_steps_between_consecutive_stamps() -> None:
    headers = _relayed(CommitTimes("i"), (10.002, 10.005), (10.010, 10.011, 10.020), 10.030, 10.031)
    stages = breakdown(10.0, headers, 10.040)
    assert stages is not None
    assert list(stages) == list(STAGE_NAMES)
    expected = [0.002, 0.003, 0.005, 0.001, 0.009, 0.010, 0.001, 0.009]
    assert [stages[n] for n in STAGE_NAMES] == pytest.approx(expected, abs=2e-6)
    assert sum(stages.values()) == pytest.approx(0.040, abs=1e-5)  # received - submitted


def test_a_command_relayed_where_its_commit_time_is_unknown_folds_commit_into_the_relay() -> None:
    headers = _relayed(CommitTimes("i"), (1.0, 1.1), (1.2, 1.3, 1.4), None, 1.9)
    stages = breakdown(None, headers, None)
    assert stages is not None
    assert "commit" not in stages and "to_router" not in stages and "to_reader" not in stages
    assert stages[COMMIT_UNKNOWN] == pytest.approx(0.5)


def test_messages_without_a_stamped_record_carry_no_stamps() -> None:
    stamps = BatchStamps(1.0, 1.0, 1.0, routed={"other": (0.5, 0.6)})
    assert stamps.header("t", "i:0") is None
    times = CommitTimes("i")
    plain = (("traceparent", b"x"),)
    assert times.restamp(plain, 2.0) == plain
    assert breakdown(0.0, plain, 3.0) is None


@pytest.mark.parametrize(
    "headers",
    [
        [(DECIDED_HEADER, b"1,2,3;i:0"), (RELAYED_HEADER, b"4,5")],  # too few decider stamps
        [(DECIDED_HEADER, b"1,2,3,4,x;i:0"), (RELAYED_HEADER, b"4,5")],
        [(DECIDED_HEADER, b"1,2,3,4,5;i:0"), (RELAYED_HEADER, b"\xff")],
        [(DECIDED_HEADER, b"1,2,3,4,5;i:0")],  # never relayed
    ],
)
def test_unreadable_or_partial_stamps_give_no_breakdown(headers: list[tuple[str, bytes]]) -> None:
    assert breakdown(0.0, headers, 9.0) is None


def test_the_router_header_reads_back_and_a_bad_one_is_ignored() -> None:
    assert routed_stamps([("a", b"b"), routed_header(1.25, 1.5)]) == (1.25, 1.5)
    assert routed_stamps([("gfs-stage-routed", b"nope")]) is None
    assert routed_stamps([]) is None


def test_the_relay_hands_the_service_its_stages_for_metrics() -> None:
    seen: list[dict[str, float]] = []
    times = CommitTimes("i")
    times.on_stages = lambda found: seen.append(dict(found))
    _relayed(times, (1.0, 1.1), (1.2, 1.3, 1.4), 1.6, 1.7)
    assert len(seen) == 1
    assert set(seen[0]) == set(STAGE_NAMES) - {"to_router", "to_reader"}
    _relayed(times, (1.0, 1.1), (1.2, 1.3, 1.4), 1.6, 1.705)  # 5 ms later: not sampled
    _relayed(times, (1.0, 1.1), (1.2, 1.3, 1.4), 1.6, 1.711)
    assert len(seen) == 2


def test_the_commit_times_are_bounded() -> None:
    times = CommitTimes("i")
    tokens = [times.token() for _ in range(20_005)]
    for n, token in enumerate(tokens):
        times.committed(token, float(n))

    def relayed(token: str) -> bytes:
        return times.restamp(((DECIDED_HEADER, f"1,2,3,4,5;{token}".encode()),), 9.0)[-1][1]

    assert relayed(tokens[0]) == b",9.000000"  # forgotten: the oldest went first
    assert relayed(tokens[-1]).startswith(b"20004")


def test_the_budget_counts_records_whose_stages_do_not_add_up_or_run_backwards() -> None:
    state = BenchState()
    state.latency = {"a": 0.100, "b": 0.100, "c": 0.100, "d": 0.100}
    state.stages = {
        "a": {"to_router": 0.05, "to_reader": 0.05},  # adds up
        "b": {"to_router": 0.05, "to_reader": 0.04},  # 10% short: a stage missing
        "c": {"to_router": 0.12, "to_reader": -0.02},  # adds up, but a stamp out of step order
    }
    budget = stage_budget(state, ["a", "b", "c", "d"], show=False)
    assert (budget.tasks, budget.staged, budget.within, budget.ordered) == (4, 3, 2, 2)
    assert budget.worst == pytest.approx(0.10)
