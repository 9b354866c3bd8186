"""Issue 38 item 1 on the real broker: no task runs in two places at once, also while a node comes
back from a partition.

The preemption service runs for real (Kafka, Postgres). Node n1 is the real agent in a network
namespace of its own whose only link to the broker the test cuts and heals (netns_link.py: packets
stop both ways, connections stay open). n0 is the real agent in this process. Both self-fence
(services/node_agent/fence.py): 3 s without an acknowledged heartbeat freezes the workers, contact
back within 8 s thaws them, later kills them. The service declares a node lost after 10 s of
silence with 1 s of clock skew allowed, so not before 9 s: above the thaw window, as the fence's
rule requires (AGENT_FENCE_THAW_WITHIN_S <= PREEMPTION_NODE_TIMEOUT_S - PREEMPTION_MAX_CLOCK_SKEW_S).

A sampler reads both workers' process states every 20 ms from /proc (the agents' journals name
the pids): a worker runs when its process exists and is not stopped (state T: a frozen process
executes nothing). It must never see two runs of the task at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from live_harness import Tap
from netns_link import BrokerLink, netns_argv
from node_agent_world import _settings as _agent_settings
from node_agent_world import agent_in_process
from preemption_world import Cluster, _registered, _service, _settings, _until

from gfs.schemas.commands import EvictCommand
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import EvictionReason, TaskClass, TaskStarted, TaskSubmitted
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent import procs
from gfs.services.node_agent.service import AgentOptions

pytestmark = pytest.mark.integration

SECRET = "it-partition-master-secret-0123456789"
FENCE_AFTER_S, THAW_WITHIN_S = 3.0, 8.0
SERVICE = {
    "preemption_node_timeout_s": 10.0,
    "preemption_max_clock_skew_s": 1.0,
    "gfs_command_secret": SECRET,
    "preemption_bind_start_timeout_s": 3.0,
    "preemption_unknown_work_after_s": 1.5,
    "preemption_report_every_s": 0.5,
}


def _workers(state_dir: Path, task: str) -> list[dict[str, Any]]:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        journal = json.loads((state_dir / "journal.json").read_text())
        return [w for w in journal["workers"].values() if w["task_id"] == task]
    return []


def _runs(state_dir: Path, task: str, attempt: int) -> bool:
    """Whether the node's worker of `task`'s attempt is running now (alive and not stopped)."""
    for worker in _workers(state_dir, task):
        if worker["attempt"] != attempt or not worker["pid"]:
            continue
        stat = procs.read_stat(worker["pid"])
        if stat is not None and stat.start_ticks == worker["start_ticks"] and stat.state not in "TtZX":
            return True
    return False


@dataclass
class Overlap:
    """Samples both runs every 20 ms; `both` counts the samples where the two ran at once."""

    old: tuple[Path, int]  # (the partitioned node's state dir, the attempt it ran)
    new: tuple[Path, int]
    task: str
    samples: int = 0
    both: int = 0
    old_ran: int = 0
    new_ran: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            old = _runs(self.old[0], self.task, self.old[1])
            new = _runs(self.new[0], self.task, self.new[1])
            self.samples += 1
            self.old_ran += old
            self.new_ran += new
            self.both += old and new
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.02)


@contextlib.asynccontextmanager
async def _partitionable_agent(
    kafka: str, pool: str, node: str, state_dir: Path, tmp_path: Path
) -> AsyncIterator[BrokerLink]:
    """The real agent (`gfs serve node-agent`) in a network namespace of its own; yields the link
    the test cuts. Its workers are killed after."""
    host, _, port = kafka.split(",")[0].rpartition(":")
    link = await BrokerLink(tmp_path / f"{node}.sock", host, int(port)).start()
    agent = [sys.executable, "-m", "gfs.services", "serve", "node-agent", "--node", node, "--gpu-model", pool,
             "--gpus", "2", "--fake-gpus", "--telemetry-s", "0.5", "--state-dir", str(state_dir)]  # fmt: skip
    env = os.environ | {
        "KAFKA_BOOTSTRAP_SERVERS": kafka,
        "GFS_COMMAND_SECRET": SECRET,
        "AGENT_FENCE_AFTER_S": f"{FENCE_AFTER_S:g}",
        "AGENT_FENCE_THAW_WITHIN_S": f"{THAW_WITHIN_S:g}",
        "AGENT_KILL_WAIT_S": "3",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "PYTHONUNBUFFERED": "1",
    }
    log = (tmp_path / f"{node}.log").open("w")
    proc = subprocess.Popen(
        netns_argv(f"{host}:{port}", link.path, agent), env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        await asyncio.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail(
                f"the partitionable agent did not start (needs root for `unshare -n`): "
                f"{(tmp_path / f'{node}.log').read_text()}"
            )
        yield link
    finally:
        await link.stop()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        _kill_all(state_dir)


def _kill_all(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        journal = json.loads((state_dir / "journal.json").read_text())
        for worker in journal["workers"].values():
            if worker["pid"] and worker["start_ticks"] and worker["exited_at"] is None:
                procs.signal_group(worker["pid"], worker["start_ticks"], signal.SIGCONT)
                procs.signal_group(worker["pid"], worker["start_ticks"], signal.SIGKILL)


async def _running_on(c: Cluster, task: str, node: str) -> None:
    """Submit `task` (2 GPUs, spot, 300 s) and wait until it runs on `node`."""
    argv = (sys.executable, "-m", "gfs.services.node_agent.fake_task", "--duration", "300")
    submitted = TaskSubmitted(task_id=task, tenant="org-it", gpu_model=c.pool, gpus_per_worker=2, workers=1,
                              task_class=TaskClass.SPOT, command=argv)  # fmt: skip
    await c.producer.send("gfs.tasks.submit", wrap(submitted, producer="it"))
    (bind,) = await c.bind_of(task)
    assert (bind.node, bind.attempt) == (node, 1)
    await c.tap.wait(TaskStarted, lambda e: e.task_id == task, timeout=30.0)


def _frozen_at(state_dir: Path, task: str, attempt: int) -> datetime | None:
    for worker in _workers(state_dir, task):
        if worker["attempt"] == attempt and worker["frozen_at"]:
            return datetime.fromisoformat(worker["frozen_at"])
    return None


@pytest.mark.asyncio(loop_scope="session")
async def test_a_partitioned_node_freezes_its_run_before_it_runs_elsewhere_and_kills_it_on_return(
    world: tuple[Cluster, str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    c, dsn = world
    c.secret = SECRET
    b = f"B-{c.pool}"
    n0, n1 = c.node(0), c.node(1)
    d0, d1 = tmp_path / n0, tmp_path / n1
    settings = _settings(dsn, kafka_bootstrap, c.pool, **SERVICE)
    n0_settings = _agent_settings(
        kafka_bootstrap, tmp_path, gfs_command_secret=SECRET, agent_kill_wait_s=3.0,
        agent_fence_after_s=FENCE_AFTER_S, agent_fence_thaw_within_s=THAW_WITHIN_S,
    )  # fmt: skip
    n0_options = AgentOptions(
        node=n0, gpu_model=c.pool, gpus=2, fake_gpus=True, telemetry_s=0.5, state_dir=d0
    )
    acks = await Tap(kafka_bootstrap, ("gfs.commands.worker-ack",)).start()
    stop = asyncio.Event()
    overlap = Overlap(old=(d1, 1), new=(d0, 2), task=b)
    sampler = asyncio.create_task(overlap.run(stop))
    try:
        async with (
            _service(settings) as (decider, _),
            _partitionable_agent(kafka_bootstrap, c.pool, n1, d1, tmp_path) as link,
        ):
            await c.quota(4.0)
            await _until(_registered(decider, c.pool, 1), timeout=60.0)
            await _running_on(c, b, n1)
            link.cut()  # n1 is cut off with B's attempt 1 running; n0 joins
            cut = time.monotonic()
            try:
                async with agent_in_process(n0_settings, n0_options, wait_s=40):
                    lost = (await c.tap.wait(EvictCommand, lambda e: e.task_ids == (b,), timeout=40.0))[0]
                    assert (lost.node, lost.reason, lost.attempt) == (n1, EvictionReason.NODE_LOST, 1)
                    assert time.monotonic() - cut >= 9.0 - 0.5  # not before the service's rule allows
                    bind_2 = (await c.bind_of(b, count=2))[1]
                    assert (bind_2.node, bind_2.attempt) == (n0, 2)
                    started_2 = (
                        await acks.wait(
                            WorkerStarted, lambda e: e.task_id == b and e.attempt == 2, timeout=30.0
                        )
                    )[0]
                    # n1 froze attempt 1 before attempt 2 started on n0.
                    frozen = _frozen_at(d1, b, 1)
                    assert frozen is not None and frozen < started_2.started_at, (frozen, started_2)
                    await _until(lambda: overlap.new_ran > 25, timeout=10.0)  # n0's run ran a while
                    link.heal()  # n1 back: contact long after its thaw window, so attempt 1 is killed
                    gone = (
                        await acks.wait(
                            WorkerExited, lambda e: e.task_id == b and e.attempt == 1, timeout=30.0
                        )
                    )[0]
                    assert gone.node == n1 and gone.evicted and gone.detail.startswith("fenced: "), gone
                    await _until(
                        lambda: not any(w["exited_at"] is None for w in _workers(d1, b)), timeout=10.0
                    )
                    await asyncio.sleep(2.0)  # n1's heartbeats read again: back, nothing else moves
                    run = decider.owned_pools()[c.pool].tasks[b].run
                    assert run is not None and run.number == 2
                    assert _runs(d0, b, 2)
                    assert not c.tap.payloads(EvictCommand, lambda e: e.node == n0)
            finally:
                _kill_all(d0)
    finally:
        stop.set()
        await sampler
        await acks.stop()
    print(f"overlap sampler: {overlap}")
    assert overlap.old_ran > 25 and overlap.new_ran > 25, overlap  # both runs were seen running
    assert overlap.both == 0, overlap


@pytest.mark.asyncio(loop_scope="session")
async def test_a_cut_shorter_than_the_thaw_window_pauses_the_run_and_the_node_is_never_lost(
    world: tuple[Cluster, str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    c, dsn = world
    c.secret = SECRET
    a = f"A-{c.pool}"
    n1 = c.node(1)
    d1 = tmp_path / n1
    settings = _settings(dsn, kafka_bootstrap, c.pool, **SERVICE)
    async with (
        _service(settings) as (decider, _),
        _partitionable_agent(kafka_bootstrap, c.pool, n1, d1, tmp_path) as link,
    ):
        await c.quota(4.0)
        await _until(_registered(decider, c.pool, 1), timeout=60.0)
        await _running_on(c, a, n1)
        link.cut()
        cut = time.monotonic()
        await _until(lambda: _frozen_at(d1, a, 1) is not None, timeout=10.0)
        assert not _runs(d1, a, 1)  # frozen
        link.heal()  # at once: the reconnection still has the rest of the thaw window (8 s)
        await _until(lambda: _runs(d1, a, 1) and _frozen_at(d1, a, 1) is None, timeout=10.0)
        await asyncio.sleep(max(0.0, cut + 13.0 - time.monotonic()))  # past the node timeout
        assert not c.tap.payloads(EvictCommand, lambda e: a in e.task_ids)
        run = decider.owned_pools()[c.pool].tasks[a].run
        assert run is not None and run.number == 1
        assert _runs(d1, a, 1)
