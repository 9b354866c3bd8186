"""Issue 22 on the agent's side: file paths from ids stay inside the agent's folders, a worker's
environment is an allowlist without secrets, and an agent given the master secret keeps only its
node key. Hand-worked expectations; the agent runs real `fake-task` workers (no Kafka)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.paths import MAX_PART_BYTES, path_part
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.node_agent.worker_env import DEFAULT_ALLOW, parse_allow, worker_environment
from gfs.services.platform.signing import node_key
from tests.unit.node_agent.conftest import AgentHarness, bind, start_agent, worker_env

MASTER = "unit-master-secret-0123456789abcdef"


@pytest.mark.parametrize(
    ("task_id", "part"),
    [
        ("job-1", "job-1"),  # a plain id is its own path component (existing folders keep their name)
        ("../escape", "..%2Fescape"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("a/b/../../c", "a%2Fb%2F..%2F..%2Fc"),
        ("/etc/passwd", "%2Fetc%2Fpasswd"),
        ("50%", "50%25"),  # "%" itself is escaped, so two different ids never share a folder
        ("job 7", "job%207"),
    ],
)
def test_a_path_part_is_one_component_inside_its_folder(task_id: str, part: str, tmp_path: Path) -> None:
    assert path_part(task_id) == part
    assert (tmp_path / path_part(task_id)).resolve().parent == tmp_path.resolve()


def test_a_long_id_is_shortened_with_a_digest_and_stays_distinct() -> None:
    a, b = "/" * 256, "/" * 255 + "x"  # escaped: 768 bytes, above the 255-byte name limit
    assert len(path_part(a)) <= MAX_PART_BYTES and len(path_part(b)) <= MAX_PART_BYTES
    assert path_part(a) != path_part(b)
    assert "/" not in path_part(a)


async def test_a_task_id_with_dot_dot_cannot_put_its_log_outside_the_log_folder(
    harness: AgentHarness, tmp_path: Path
) -> None:
    tid = "../../../outside"
    await harness.send(bind(tid, "--duration", "0.1"))
    await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
    assert harness.sink.payloads(WorkerStarted)[0].task_id == tid
    logs = harness.agent.log_dir.resolve()
    (worker,) = harness.agent.journal.state.workers.values()
    assert Path(worker.log_path).resolve().parent == logs
    assert Path(worker.log_path).name.startswith("..%2F..%2F..%2Foutside.0.")
    assert not (tmp_path / "outside.0").exists() and not list(tmp_path.parent.glob("outside.*"))


def test_the_worker_environment_is_the_allowlist_without_secrets() -> None:
    agent_env = {
        "PATH": "/usr/bin", "HOME": "/home/gfs", "LC_ALL": "C.UTF-8", "CUDA_HOME": "/usr/local/cuda",
        "GFS_NODE_KEY": "ab" * 32, "GFS_COMMAND_SECRET": MASTER, "DATABASE_URL": "postgresql://u:p@db/gfs",
        "KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer x",
        "PREEMPTION_ADMIN_TOKEN": "t",
    }  # fmt: skip
    assert worker_environment(agent_env) == {
        "PATH": "/usr/bin", "HOME": "/home/gfs", "LC_ALL": "C.UTF-8", "CUDA_HOME": "/usr/local/cuda",
    }  # fmt: skip
    # Configurable; even "*" never passes a key, the master secret or the database URL.
    assert worker_environment(agent_env, parse_allow(" PATH , KAFKA_* ,")) == {
        "PATH": "/usr/bin", "KAFKA_BOOTSTRAP_SERVERS": "k:9092",
    }  # fmt: skip
    everything = worker_environment(agent_env, ("*",))
    secrets = {"GFS_NODE_KEY", "GFS_COMMAND_SECRET", "DATABASE_URL", "PREEMPTION_ADMIN_TOKEN"}
    assert secrets.isdisjoint(everything)
    assert parse_allow(NodeAgentSettings().agent_worker_env_allow) == DEFAULT_ALLOW


async def test_a_worker_started_from_a_leaky_base_environment_still_sees_no_secret(
    tmp_path: Path, kill_leftovers: Callable[[Journal], None]
) -> None:
    # The harness's base environment is the test process's own: add the secrets to it.
    leaky = {**worker_env(), "GFS_COMMAND_SECRET": MASTER, "GFS_NODE_KEY": "ab" * 32}
    harness = start_agent(tmp_path / "agent", worker_env={**leaky, "DATABASE_URL": "postgresql://x"})
    try:
        env_file = tmp_path / "env.json"
        await harness.send(bind("job-env", "--duration", "0.2", "--env-file", str(env_file)))
        await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
        env = json.loads(env_file.read_text())
        assert {"GFS_COMMAND_SECRET", "GFS_NODE_KEY", "DATABASE_URL"}.isdisjoint(env)
        assert env["GFS_TASK_ID"] == "job-env"
    finally:
        await harness.crash()
        kill_leftovers(harness.agent.journal)


def test_an_agent_given_the_master_secret_keeps_only_its_node_key() -> None:
    settings = NodeAgentSettings(gfs_command_secret=SecretStr(MASTER), gfs_node_key=None)
    own = settings.own_key_only("gpu-7")
    assert own.gfs_command_secret is None
    assert own.gfs_node_key is not None
    assert own.gfs_node_key.get_secret_value() == node_key(MASTER.encode(), "gpu-7").hex()
    assert own.command_key("gpu-7") == node_key(MASTER.encode(), "gpu-7")
    assert MASTER not in own.model_dump_json()
