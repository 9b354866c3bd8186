"""Two deployments on one broker (issue 38 item 5): each ignores what the other published.

Deployments A and B share the broker, the pool name, the node name and even the command secret (a
copy of production's settings, the case signatures cannot tell apart), each with its own Postgres
schema, groups and inbox. A's quota, heartbeats and task are published under A's id; B's scheduler
must not see them, and B's real node agent, named as A's node, must not run the task A binds
there. A task published under B's id is B's alone. Without the ids every one of these crosses
(docs/protocol.md section 8)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from live_harness import Tap
from node_agent_world import SECRET as AGENT_SECRET
from node_agent_world import _settings as _agent_settings
from node_agent_world import agent_in_process
from preemption_world import Cluster, Heartbeats, _service, _settings, _until
from quota_harness import _fresh_schema, _migrated

from gfs.schemas.commands import BindCommand
from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskRejected
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.service import AgentOptions
from gfs.services.platform.kafka.producer import EnvelopeProducer

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_two_deployments_on_one_broker_ignore_each_others_records(
    world: tuple[Cluster, str], kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    c, dsn_a = world
    c.secret = AGENT_SECRET  # one secret for both: only the deployment id tells them apart
    run = uuid.uuid4().hex[:6]
    dep_a, dep_b = f"it-a-{run}", f"it-b-{run}"
    node = c.node(0)
    a_task, b_task = f"A-{c.pool}", f"B-{c.pool}"
    common = {"gfs_command_secret": AGENT_SECRET}
    agent_b = _agent_settings(kafka_bootstrap, tmp_path, gfs_deployment=dep_b)
    options = AgentOptions(node=node, gpu_model=c.pool, gpus=2, fake_gpus=True, telemetry_s=0.5,
                           state_dir=tmp_path / node)  # fmt: skip
    acks = await Tap(kafka_bootstrap, ("gfs.commands.worker-ack",)).start()
    try:
        async with (
            _fresh_schema(database_url) as schema_b,
            EnvelopeProducer(bootstrap_servers=kafka_bootstrap, deployment=dep_a) as producer_a,
            EnvelopeProducer(bootstrap_servers=kafka_bootstrap, deployment=dep_b) as producer_b,
        ):
            dsn_b = await _migrated(database_url, schema_b)
            settings_a = _settings(dsn_a, kafka_bootstrap, c.pool, gfs_deployment=dep_a, **common)
            settings_b = _settings(dsn_b, kafka_bootstrap, c.pool, gfs_deployment=dep_b, **common)
            async with (
                _service(settings_a) as (decider_a, _),
                _service(settings_b) as (decider_b, _),
                agent_in_process(agent_b, options),
            ):
                c.producer = producer_a  # the test speaks as A: quota, heartbeats of `node`, a task
                await c.quota(4.0)
                async with Heartbeats(c, {node: 2}, every=0.5):
                    owned = decider_a.owned_pools
                    await _until(lambda: node in getattr(owned().get(c.pool), "nodes", {}), timeout=30.0)
                    await c.submit(a_task, TaskClass.HP, gpus=1)
                    (bind,) = await c.bind_of(a_task)
                    assert bind.node == node
                    c.producer = producer_b
                    await c.submit(b_task, TaskClass.HP, gpus=1)
                    answers = (TaskAccepted, TaskRejected)
                    await c.tap.wait(answers, lambda e: e.task_id == b_task, timeout=30.0)
                    await asyncio.sleep(3.0)  # time for anything that would cross to cross
                pool_a, pool_b = decider_a.owned_pools()[c.pool], decider_b.owned_pools()[c.pool]
                # A holds its task, its node and its quota; B none of them (B's agent's heartbeats
                # name the same node under B's id, which A never saw).
                assert a_task in pool_a.tasks and b_task not in pool_a.tasks
                assert list(pool_a.nodes) == [node] and pool_a.quota_version
                assert a_task not in pool_b.tasks and not pool_b.quota_version
                # Each task answered once, by its own deployment.
                answered = c.tap.payloads(answers, lambda e: e.task_id in (a_task, b_task))
                assert sorted(e.task_id for e in answered) == sorted([a_task, b_task]), answered
                # B's agent, named as A's node and holding the same key, never ran A's bind; it ran
                # B's own task, which B bound on it (the agent acts on its own deployment's binds).
                worker_acks = (WorkerStarted, WorkerExited)  # (the command may not start: 127)
                assert not acks.payloads(worker_acks, lambda e: e.task_id == a_task)
                await acks.wait(worker_acks, lambda e: e.task_id == b_task and e.node == node, timeout=30.0)
                assert not c.tap.payloads(BindCommand, lambda e: e.task_id == b_task and e.node != node)
    finally:
        await acks.stop()
