"""A node that joins a running pool (`PoolRuntime.add_node`): afterwards the pool decides exactly as
one built with that node from the start, and a shape rejected before may now be accepted."""

from __future__ import annotations

from builders import a_pool, a_spot, a_task

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.reasons import Rejection
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings, Started, Stopped


def _decisions(
    rt: PoolRuntime, t: float
) -> list[tuple[str, str, tuple[str, ...], tuple[tuple[int, ...], ...]]]:
    out = []
    for o in rt.schedule(t).outcomes:
        if isinstance(o, Started):
            nodes = tuple(rt.state.node_names[p.node] for p in o.placements)
            out.append(("start", o.task_id, nodes, tuple(d.devices for d in o.devices)))
        elif isinstance(o, Stopped):
            out.append(("stop", o.task_id, (rt.state.node_names[o.node],), ()))
    return out


def _script(rt: PoolRuntime, first_t: float) -> list[object]:
    log: list[object] = []
    rt.submit(a_spot("s1", gpus=2, submit=first_t), first_t)
    rt.submit(a_spot("s2", gpus=0.5, submit=first_t), first_t)
    log += _decisions(rt, first_t)
    rt.submit(a_spot("s3", gpus=4, submit=first_t + 10), first_t + 10)
    log += _decisions(rt, first_t + 10)
    rt.submit(a_task("h1", gpus=4, workers=2, submit=first_t + 20), first_t + 20)
    log += _decisions(rt, first_t + 20)
    rt.finish("h1", first_t + 30)
    log += _decisions(rt, first_t + 30)
    return log


def test_a_joined_node_behaves_like_one_present_from_the_start() -> None:
    policy = build_policy("gfs")
    settings = RuntimeSettings()
    built = PoolRuntime(a_pool(4, 8), policy, settings)
    grown = PoolRuntime(PoolState(built.state.pool, ("n0",), (4,)), build_policy("gfs"), settings)
    assert grown.add_node("n1", 8, 0.0) == 1
    for rt in (built, grown):  # the initial quota is the capacity at construction: align them
        rt.update_quota(dict.fromkeys(rt.quota, 12.0), 1.0)
    assert grown.state.capacity == built.state.capacity == 12
    assert list(grown.state.node_offset) == list(built.state.node_offset) == [0, 4]
    assert list(grown.state.gpu_node) == list(built.state.gpu_node)
    assert _script(grown, 5.0) == _script(built, 5.0)
    assert grown.state.free.tolist() == built.state.free.tolist()


def test_an_empty_pool_rejects_until_a_node_joins() -> None:
    rt = PoolRuntime(PoolState(a_pool(1).pool, (), ()), build_policy("gfs"), RuntimeSettings())
    assert rt.submit(a_task("h", gpus=2, submit=0.0), 0.0) is Rejection.WORKER_LARGER_THAN_NODE
    rt.add_node("big", 8, 1.0)
    assert rt.submit(a_task("h", gpus=2, submit=1.0), 1.0) is None
    (started,) = rt.schedule(1.0).outcomes
    assert isinstance(started, Started) and started.devices[0].devices == (0, 1)


def test_a_node_name_joins_once() -> None:
    rt = PoolRuntime(a_pool(2), build_policy("gfs"), RuntimeSettings())
    try:
        rt.add_node("n0", 2, 0.0)
    except ValueError as exc:
        assert "already" in str(exc)
    else:
        raise AssertionError("a second n0 was accepted")
