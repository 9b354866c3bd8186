"""Simulator invariants on random tiny traces: every task ends finished, running or queued;
same input, same result."""

from __future__ import annotations

from builders import a_job, a_node, a_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare, run_policies

JOB = st.tuples(
    st.sampled_from(["HP", "SPOT"]),
    st.sampled_from([0.5, 1, 2, 4, 8]),
    st.integers(1, 2),
    st.integers(0, 20000),
    st.integers(60, 20000),
)


def _trace(jobs: list[tuple[str, float, int, int, int]]):  # type: ignore[no-untyped-def]
    nodes = [a_node("n0", gpus=8), a_node("n1", gpus=8), a_node("n2", gpus=1)]
    return a_trace(
        nodes,
        [
            a_job(f"j{i:02d}", cls=c, gpus=g, workers=w, submit=s, duration=d)
            for i, (c, g, w, s, d) in enumerate(jobs)
        ],
    )


@settings(max_examples=25)
@given(st.lists(JOB, min_size=1, max_size=15), st.sampled_from(["gfs", "fifo"]))
def test_every_task_is_finished_running_or_queued(
    jobs: list[tuple[str, float, int, int, int]], name: str
) -> None:
    trace = _trace(jobs)
    run = RunSettings()
    workload, demand = prepare(trace, run)
    sim = build_simulation(workload, demand, build_policy(name), run)
    sim.run()
    running = {t for rt in sim.pools.values() for t in rt.state.running}
    queued = {t for rt in sim.pools.values() for q in (rt.hp, rt.spot) for t in q.task_ids()}
    for spec in workload.tasks:
        life = sim.lives[spec.task_id]
        finished = life.end == life.end  # not nan
        states = [finished, spec.task_id in running, spec.task_id in queued]
        assert sum(states) == 1, (spec.task_id, states)
    for rt in sim.pools.values():
        assert (rt.state.free >= 0).all()


@settings(max_examples=10)
@given(st.lists(JOB, min_size=1, max_size=12))
def test_same_input_same_result(jobs: list[tuple[str, float, int, int, int]]) -> None:
    trace = _trace(jobs)
    a = run_policies(trace, ["gfs", "fifo"], RunSettings(seed=3)).to_json()
    b = run_policies(trace, ["gfs", "fifo"], RunSettings(seed=3)).to_json()
    for out in (a, b):
        for metrics in out["policies"].values():
            metrics.pop("sim_wall_s")
    assert a == b
