"""Integration fixtures: the real Kafka broker and Postgres, never fakes.

Where they come from, in order:
1. KAFKA_BOOTSTRAP_SERVERS / DATABASE_URL when set (the script-started stack: `make up`, CI);
2. otherwise testcontainers, when a Docker engine answers a ping;
3. otherwise the test FAILS (not skips) with instructions: a silently skipped integration tier
   would let CI pass while testing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from aiokafka.errors import KafkaConnectionError
from node_agent_world import ack_reader, publisher  # noqa: F401 (fixtures: see below)
from preemption_world import world  # noqa: F401 (a fixture: see below)
from quota_harness import _fresh_schema

from gfs.schemas.topics import TOPICS
from gfs.services.platform.kafka.topic_admin import TopicsReport, ensure_topics

if TYPE_CHECKING:
    from secure_broker import SecureBroker

HOW_TO_START = (
    "no Kafka/Postgres for the integration tests: {what} is not set and no Docker engine answers. "
    'Start the stack with `make up`, then `eval "$(infra/stack.sh env)"` and re-run pytest.'
)
KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.1"  # Apache Kafka 3.9, like the local stack (3.9.1) and compose
POSTGRES_IMAGE = "postgres:15-alpine"  # PostgreSQL 15, like Debian bookworm and compose
# The broker may still be finishing its start (or restarting) when the session begins.
CONNECT_DEADLINE_S = 60.0


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


# Modules whose tests run on one xdist worker, one after another (scripts/test.sh runs the
# non-disruptive integration tests on two workers, `--dist loadgroup`; every other module is a group
# of its own, so a module's fixtures are set up once):
# - whole-cluster runs that name their tasks "A", "H1", ... (live_cluster.py), so two of them side
#   by side could read each other's events on the shared topics;
# - the two users of the session's secured broker (one JVM start, not one per worker);
# - the two replays on the controllable clock (they share gfs.control.clock).
SHARED_GROUPS = {
    "whole-cluster": (
        "test_live_cluster", "test_scale_out", "test_key_rotation", "test_traces_in_jaeger",
        "test_command_security", "test_dashboard", "test_kafka_security_acls", "test_kafka_security_clients",
    ),
    "clock-replays": ("test_sim_live_parity", "test_whatif_live"),
}  # fmt: skip
_GROUP_OF = {module: group for group, modules in SHARED_GROUPS.items() for module in modules}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Disruptive tests (the pipeline benchmark floods the task topics; the fault harness stops the
    broker and Postgres) run after every other test, so the others never wait behind a flood or
    meet a broker that is restarting. Their relative order is kept. Each integration test gets its
    xdist group (SHARED_GROUPS, else its module)."""
    for item in items:
        if item.get_closest_marker("integration") is None:
            continue
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else item.nodeid
        item.add_marker(pytest.mark.xdist_group(_GROUP_OF.get(module, module)))
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    if not _docker_answers():
        pytest.fail(HOW_TO_START.format(what="KAFKA_BOOTSTRAP_SERVERS"), pytrace=False)
    from testcontainers.community.kafka import KafkaContainer

    with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
        yield container.get_bootstrap_server()


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    if not _docker_answers():
        pytest.fail(HOW_TO_START.format(what="DATABASE_URL"), pytrace=False)
    from testcontainers.community.postgres import PostgresContainer

    with PostgresContainer(POSTGRES_IMAGE, driver=None) as container:
        yield container.get_connection_url()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def registry_topics(kafka_bootstrap: str) -> TopicsReport:
    """Every registry topic exists, created by the same code as `gfs stack topics`."""
    deadline = asyncio.get_running_loop().time() + CONNECT_DEADLINE_S
    while True:
        try:
            return await ensure_topics(kafka_bootstrap, TOPICS)
        except KafkaConnectionError as exc:
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(
                    f"Kafka at {kafka_bootstrap} did not answer within {CONNECT_DEADLINE_S:.0f}s: {exc}"
                )
            await asyncio.sleep(1.0)


# Fixtures of the harness modules, made this folder's so the modules that take them need not import
# them (a module with one of the same name overrides it, as pytest does): `world`, the preemption
# service's tests' (preemption_world.py: a migrated scratch schema, a tap and a Cluster, the test in
# the node agents' seat); `ack_reader` and `publisher`, the node agent's (node_agent_world.py).


@pytest.fixture
def unique_group(request: pytest.FixtureRequest) -> str:
    """A consumer group nobody else uses, so each test reads its topics from the beginning."""
    return f"it-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


@pytest_asyncio.fixture(loop_scope="session")
async def scratch_schema(database_url: str) -> AsyncIterator[str]:
    """A fresh, empty Postgres schema (dropped afterwards), so migration tests start from zero
    without touching the stack's own tables in `public`."""
    async with _fresh_schema(database_url) as name:
        yield name


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """The secured broker of `infra/kafka/secure.sh` (secure_broker.py): started once for the
    session's Kafka security tests (test_kafka_security_acls.py and test_kafka_security_clients.py
    share it: a JVM broker takes a minute to start), stopped and wiped at the end."""
    from secure_broker import SecureBroker, free_port_pair

    broker = SecureBroker(tmp_path_factory.mktemp("kafka-secure"), free_port_pair())
    try:
        broker.script("up")
        yield broker
    finally:
        with contextlib.suppress(Exception):
            broker.script("reset")
