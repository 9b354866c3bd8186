"""The secured broker of `infra/kafka/secure.sh` for the Kafka security tests (issue 25, item 2):
test_kafka_security_acls.py (what the broker's ACL table lets each principal do) and
test_kafka_security_clients.py (each client connecting as its own principal) share one broker, the
session fixture `secure_broker` (tests/integration/conftest.py), started once for both.

`infra/kafka/secure.sh` starts a single broker with a SASL_SSL listener (TLS from a throwaway CA,
SCRAM-SHA-512 users), StandardAuthorizer and the ACL table of services/platform/kafka/acls.py, in a
folder and on ports of its own: the shared plaintext broker on 9092 is never touched. Every client
connects as one principal, through the same `KafkaSecurity` settings the services use
(KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_CAFILE).
"""

from __future__ import annotations

import os
import random
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from live_harness import REPO
from pydantic import SecretStr

from gfs.schemas.topics import topic
from gfs.services.platform.kafka_security import KafkaSecurity

SECURE_SH = REPO / "infra" / "kafka" / "secure.sh"


AGENTS = ("n1", "n2")


@dataclass(frozen=True, slots=True)
class SecureBroker:
    """The broker of `infra/kafka/secure.sh`, in a folder and on ports of its own."""

    folder: Path
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def script(self, *args: str, timeout: float = 900.0) -> str:
        env = os.environ | {
            "KAFKA_SECURE_DIR": str(self.folder),
            "KAFKA_SECURE_PORT": str(self.port),
            "KAFKA_SECURE_AGENTS": " ".join(AGENTS),
            # A loaded CI machine may take minutes to start a JVM broker (the script's default: 120 s).
            "KAFKA_WAIT_TIMEOUT": os.environ.get("KAFKA_WAIT_TIMEOUT", "300"),
        }
        done = subprocess.run(
            ["bash", str(SECURE_SH), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"secure.sh {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def env_of(self, principal: str) -> dict[str, str]:
        """The client exports `secure.sh env PRINCIPAL` prints (what a service's env would hold)."""
        out: dict[str, str] = {}
        for line in self.script("env", principal).splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            out[name] = shlex.split(value)[0] if value else ""
        return out

    def security(self, principal: str, *, password: str | None = None) -> KafkaSecurity:
        env = self.env_of(principal)
        return KafkaSecurity(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username=env["KAFKA_SASL_USERNAME"],
            password=SecretStr(password or env["KAFKA_SASL_PASSWORD"]),
            cafile=env["KAFKA_SSL_CAFILE"],
        )


def free_port_pair() -> int:
    """A port P with P and P+1 free, below the kernel's ephemeral range (as test_scale_out)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(20_000, min(low, 32_768) - 10)
        try:
            for port in (base, base + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no two free ports for the secured broker")


async def end_offsets(broker: SecureBroker, topic_name: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        **broker.security("admin").client_kwargs(),
    )
    await consumer.start()
    try:
        parts = [TopicPartition(topic_name, p) for p in range(topic(topic_name).partitions)]
        ends = await consumer.end_offsets(parts)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()
