"""Decisions in words (services/preemption/sre/decision_text.py): hand-written details, hand-written
sentences. The details have the shapes the controller records (see a `preemption_decision` row)."""

from __future__ import annotations

import pytest

from gfs.services.preemption.sre.decision_text import describe, duration, gpu_time


def _eviction(considered: int, alternatives: list[dict[str, object]]) -> dict[str, object]:
    return {
        "node": "a100-07", "reason": "PREEMPTED_BY_HP", "preemptor": "d1-40", "attempt": 1, "run_s": 600.0,
        "lost_gpu_seconds": 2400.0, "trace_id": "ab" * 16,
        "explanation": {"state": "queued", "last_eviction": {
            "node": "a100-07", "reason": "PREEMPTED_BY_HP", "preemptor": "d1-40",
            "plan": {"winner": {"node": "a100-07", "victims": ["d1-12"], "cost": 0.3125},
                     "alternatives": alternatives, "considered": considered},
        }},
    }  # fmt: skip


def test_an_eviction_names_victim_node_preemptor_and_how_it_compared() -> None:
    detail = _eviction(5, [{"node": "a100-02", "victims": ["d1-3"], "cost": 0.52}])
    assert describe("evicted", "d1-12", detail) == (
        "evicted d1-12 from a100-07 for HP d1-40: cheapest of 5 nodes, cost 0.31 vs next 0.52 (a100-02); "
        "lost 40.0 GPU-min of work since its last checkpoint"
    )


def test_an_eviction_with_one_candidate_says_so() -> None:
    detail = _eviction(1, [])
    assert describe("evicted", "d1-12", detail).startswith(
        "evicted d1-12 from a100-07 for HP d1-40: the only node that could make room (cost 0.31)"
    )


def test_a_stop_that_is_not_a_preemption_says_why() -> None:
    detail = {"node": "a30-01", "reason": "NODE_LOST", "run_s": 7200.0}
    assert describe("evicted", "d1-9", detail) == "stopped d1-9 on a30-01: its node went silent after 2.0 h"


@pytest.mark.parametrize(
    ("kind", "detail", "said"),
    [
        ("accepted", {"class": "SPOT"}, "accepted t1 as spot"),
        ("accepted", {"class": "HP"}, "accepted t1 as HP"),
        ("started", {"nodes": {"n1": [[0, 1]], "n2": [[3]]}, "preempted": True, "attempt": 2},
         "started t1 on n1 GPU 0,1; n2 GPU 3 after evicting spot work (attempt 2)"),
        ("finished", {"run_s": 45.0, "exit_code": 0}, "t1 finished after 45 s"),
        ("finished", {"run_s": 450.0, "exit_code": 3, "during_eviction": True},
         "t1 failed with exit code 3 after 7.5 min (its workers exited while an eviction was on its way: "
         "a finish, not an eviction)"),
        ("quota", {"eta": 0.5, "quota": {"2": 30.0, "1": 24.0}, "version": "lstm:model-a@1@2 (lstm)@now"},
         "spot quota 24 GPUs for 1 h (eta 0.50) from lstm:model-a"),
        ("evict_acked", {"node": "n1", "tasks": ["t1"], "outcome": "CHECKPOINTED"},
         "n1 confirmed the eviction of t1: checkpointed"),
        ("bind_held", {"waiting_for": ["c1", "c2"]},
         "t1 waits to start until 2 eviction(s) are confirmed by their nodes"),
        ("node_joined", {"node": "n1", "gpus": 8}, "node n1 joined with 8 GPUs"),
    ],
)  # fmt: skip
def test_each_kind_in_words(kind: str, detail: dict[str, object], said: str) -> None:
    assert describe(kind, "t1", detail) == said


def test_an_unknown_kind_or_shape_is_shown_plainly_not_dropped() -> None:
    assert describe("brand_new", "t1", {"a": 1, "trace_id": "x"}) == '{"a": 1}'
    assert describe("started", "t1", {"message": "an older record"}) == "an older record"


def test_units_a_person_reads() -> None:
    assert [duration(s) for s in (42.0, 89.0, 90.0, 450.0, 5399.0, 5400.0, 11520.0)] == [
        "42 s", "89 s", "1.5 min", "7.5 min", "90.0 min", "1.5 h", "3.2 h",
    ]  # fmt: skip
    assert gpu_time(2400.0) == "40.0 GPU-min"
