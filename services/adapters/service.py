"""`gfs serve quota-adapter`: follow gfs.quotas, keep the latest quota per pool, and hand each
changed ClusterQueue / Queue manifest to a sink (print it, or `kubectl apply --server-side`).

The adapter joins no consumer group and commits nothing: gfs.quotas is compacted by pool, so the
topic itself is the state. Each start reads it from the beginning to its end, emits the manifests
once caught up, then follows it. Applying is idempotent (server-side apply of the desired state),
so a restart that re-applies the same manifests changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.quota import SpotQuota
from gfs.schemas.topics import QUOTAS_TOPIC, decode, topic
from gfs.services.adapters.adapter import QuotaAdapter
from gfs.services.adapters.kueue import FIELD_MANAGER
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity, announce

log = logging.getLogger(__name__)

QUOTA_TOPIC = QUOTAS_TOPIC
Sink = Callable[[dict[str, Any]], Awaitable[None]]


class KubectlMissingError(RuntimeError):
    """Apply mode needs kubectl on PATH."""


class ApplyFailedError(RuntimeError):
    """kubectl refused a manifest (the message carries its stderr)."""


def print_sink(output: str, stream: TextIO | None = None) -> Sink:
    """Dry-run: print each manifest (one JSON object per line, or YAML documents)."""

    async def emit(manifest: dict[str, Any]) -> None:
        out = stream or sys.stdout
        if output == "yaml":
            out.write("---\n" + yaml.safe_dump(manifest, sort_keys=False))
        else:
            out.write(json.dumps(manifest, separators=(",", ":")) + "\n")
        out.flush()

    return emit


def kubectl_sink(kubectl: str | None = None) -> Sink:
    """Apply mode: `kubectl apply --server-side` each manifest. Fails at once without kubectl.

    `--force-conflicts`: the spot queue's resourceGroups was created by an administrator (another
    field manager) and is an atomic list; the adapter takes it over, which is the point of running it.
    """
    path = kubectl or shutil.which("kubectl")
    if path is None:
        raise KubectlMissingError(
            "kubectl was not found on PATH: install kubectl (and point KUBECONFIG at the cluster) "
            "or run the adapter with --dry-run to print the patches instead"
        )

    async def emit(manifest: dict[str, Any]) -> None:
        proc = await asyncio.create_subprocess_exec(
            path,
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "--force-conflicts",
            "-f",
            "-",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate(json.dumps(manifest).encode())
        if proc.returncode != 0:
            raise ApplyFailedError(
                f"kubectl apply exited {proc.returncode}: {err.decode(errors='replace').strip()}"
            )
        log.info("applied %s", out.decode(errors="replace").strip())

    return emit


async def flush(adapter: QuotaAdapter, sink: Sink, now: datetime) -> int:
    """Hand every changed manifest to the sink; a failed one stays changed and is retried later."""
    sent = 0
    for manifest in adapter.changed(now):
        try:
            await sink(manifest)
        except ApplyFailedError as exc:
            log.error(
                "%s %s not applied (retried on the next change or tick): %s",
                manifest["kind"],
                manifest["metadata"]["name"],
                exc,
            )
            continue
        adapter.mark_applied(manifest)
        sent += 1
    return sent


def _observe(adapter: QuotaAdapter, record: Any) -> None:
    try:
        quota = decode(QUOTA_TOPIC, record.value or b"").payload
    except Exception as exc:  # a bad record must not stop the adapter; the reason is logged
        # One line per record (pydantic's messages span several): grep-able, and bounded.
        reason = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]
        log.warning(
            "undecodable record on %s[%s]@%s skipped: %s",
            record.topic,
            record.partition,
            record.offset,
            reason,
        )
        return
    if isinstance(quota, SpotQuota):
        adapter.observe(quota)


async def run_quota_adapter(
    adapter: QuotaAdapter,
    sink: Sink,
    *,
    bootstrap_servers: str,
    stop: asyncio.Event,
    recheck_s: float = 5.0,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Follow gfs.quotas until `stop`; emit once caught up, then after every batch and every
    `recheck_s` (a quota that expires without a successor must fall back to 0 on time, and a
    failed apply is retried at that pace, not in a tight loop). `security`: TLS/SASL settings."""
    announce(security)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        **security.client_kwargs(),
    )
    await consumer.start()
    try:
        # The registry's partition count, as every other reader of a registry topic assumes.
        tps = [TopicPartition(QUOTA_TOPIC, p) for p in range(topic(QUOTA_TOPIC).partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        caught_up = False
        flushed_once = False
        last_check = asyncio.get_running_loop().time()
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    _observe(adapter, record)
            if not caught_up:
                positions = {tp: await consumer.position(tp) for tp in tps}
                caught_up = all(positions[tp] >= ends[tp] for tp in tps)
                if not caught_up:
                    continue
                log.info("caught up with %s (%d partitions)", QUOTA_TOPIC, len(tps))
            tick = asyncio.get_running_loop().time()
            if batch or tick - last_check >= recheck_s or not flushed_once:
                flushed_once = True
                last_check = tick
                await flush(adapter, sink, now())
    finally:
        await consumer.stop()
