"""`gfs deadletter list|show|replay`: read gfs.deadletter and replay letters to their source topic.

A thin Kafka shell around `gfs.services.platform.dead_letters` (the selection and replay rules). The
dead-letter topic is read without a consumer group (assigned partitions, from the beginning to the
end offsets seen at start), so reading it never moves anyone's committed offsets.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gfs.services.platform.dead_letters import (
    Letter,
    ReplayPlan,
    Selection,
    Verdict,
    plan_replay,
    summary_row,
)

if TYPE_CHECKING:
    from gfs.services.platform.kafka_security import KafkaSecurity

app = typer.Typer(no_args_is_help=True, help="Dead letters: list, show, replay after a fix.")

_Topic = Annotated[str | None, typer.Option("--topic", help="only letters from this source topic")]
_Reason = Annotated[
    str | None, typer.Option("--reason", help="only letters whose error contains this (any case)")
]
_Since = Annotated[
    datetime | None,
    typer.Option(
        "--since", help="only letters that failed at or after this instant (ISO 8601, UTC if naive)"
    ),
]
_Until = Annotated[
    datetime | None, typer.Option("--until", help="only letters that failed before this instant")
]
_Output = Annotated[str, typer.Option("--output", "-o", help="table or json")]
_Servers = Annotated[
    str | None, typer.Option(help="Kafka bootstrap servers (default: KAFKA_BOOTSTRAP_SERVERS)")
]


def _kafka(given: str | None) -> tuple[str, KafkaSecurity]:
    """The brokers (the option, else KAFKA_BOOTSTRAP_SERVERS) and how to reach them (TLS/SASL:
    KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_CAFILE; a secured broker's `admin` principal
    reads and replays any topic)."""
    from gfs.services.platform.settings import PlatformSettings

    settings = PlatformSettings()
    return given or settings.kafka_bootstrap_servers, settings.kafka_security


def _utc(value: datetime | None) -> datetime | None:
    from datetime import UTC

    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _check_output(output: str) -> None:
    if output not in ("table", "json"):
        raise typer.BadParameter(f"--output must be table or json (got {output!r})")


async def read_letters(servers: str, security: KafkaSecurity | None = None) -> list[Letter]:
    """Every letter on gfs.deadletter up to its end at the time of the call, in offset order.
    `security`: TLS/SASL settings (None: plaintext)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from gfs.schemas.dead_letter import DeadLetter
    from gfs.schemas.topics import DEAD_LETTER_TOPIC, decode, topic
    from gfs.services.platform.kafka_security import PLAINTEXT, announce

    security = security or PLAINTEXT
    announce(security)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers, enable_auto_commit=False, group_id=None, **security.client_kwargs()
    )
    await consumer.start()
    try:
        # The registry's partition count, as every other reader of a registry topic assumes.
        tps = [TopicPartition(DEAD_LETTER_TOPIC, p) for p in range(topic(DEAD_LETTER_TOPIC).partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        letters: list[Letter] = []
        pending = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
        while pending:
            batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=5000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset >= ends[tp]:
                        continue
                    try:
                        letter = decode(DEAD_LETTER_TOPIC, record.value or b"").payload
                    except ValueError as exc:  # not a letter at all: say so, keep reading
                        typer.echo(
                            f"skipping {DEAD_LETTER_TOPIC}/{tp.partition}/{record.offset}: {exc}", err=True
                        )
                        continue
                    assert isinstance(letter, DeadLetter)
                    letters.append(Letter(tp.partition, record.offset, letter))
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        return sorted(letters, key=lambda item: (item.partition, item.offset))
    finally:
        await consumer.stop()


@app.command("list")
def list_letters(
    topic: _Topic = None,
    reason: _Reason = None,
    since: _Since = None,
    until: _Until = None,
    limit: Annotated[int, typer.Option(min=1, help="show at most the newest N")] = 50,
    output: _Output = "table",
    bootstrap_servers: _Servers = None,
) -> None:
    """The dead letters that match, oldest first (the newest `limit`)."""
    _check_output(output)
    selection = Selection(topic=topic, reason=reason, since=_utc(since), until=_utc(until))
    rows = [
        summary_row(item)
        for item in asyncio.run(read_letters(*_kafka(bootstrap_servers)))
        if selection.matches(item)
    ]
    rows = rows[-limit:]
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        error = str(row["error"])[:120]
        typer.echo(
            f"{row['offset']:>8}  {row['failed_at']}  {row['source']}  {row['consumer_group']}  {error}"
        )
    typer.echo(f"{len(rows)} letter(s)", err=True)


@app.command("show")
def show(
    offset: Annotated[int, typer.Argument(help="the letter's offset on gfs.deadletter")],
    output: _Output = "table",
    bootstrap_servers: _Servers = None,
) -> None:
    """One letter: where it came from, why it failed, and its original record."""
    _check_output(output)
    found = [item for item in asyncio.run(read_letters(*_kafka(bootstrap_servers))) if item.offset == offset]
    if not found:
        typer.echo(f"no dead letter at offset {offset}", err=True)
        raise typer.Exit(code=1)
    item = found[0]
    original = item.original().decode("utf-8", errors="replace")
    try:
        shown: Any = json.loads(original)
    except ValueError:
        shown = original
    plan = plan_replay(item)
    if output == "json":
        doc = summary_row(item) | {
            "original": shown,
            "replay": plan.verdict.value,
            "replay_detail": plan.detail,
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    for name, value in summary_row(item).items():
        typer.echo(f"{name:>15}: {value}")
    typer.echo(f"{'replay':>15}: {plan.verdict.value} ({plan.detail})")
    typer.echo(json.dumps(shown, indent=2) if not isinstance(shown, str) else shown)


@app.command("replay")
def replay(
    offsets: Annotated[list[int] | None, typer.Argument(help="letters' offsets on gfs.deadletter")] = None,
    topic: _Topic = None,
    reason: _Reason = None,
    since: _Since = None,
    until: _Until = None,
    all_letters: Annotated[
        bool, typer.Option("--all", help="select every letter (no other criterion needed)")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say what would be replayed, publish nothing")
    ] = False,
    output: _Output = "table",
    bootstrap_servers: _Servers = None,
) -> None:
    """Re-publish selected letters' original records to their source topic, once the cause is fixed.

    Each record is sent byte for byte (same event_id: consumers that de-duplicate apply it once,
    however often it is replayed), keyed as the registry keys it, with a gfs-replayed-from header.
    Letters that are truncated or still fail to decode are reported and left alone. Exit status 1
    when a selected letter could not be replayed.
    """
    _check_output(output)
    selection = Selection(
        offsets=frozenset(offsets or ()), topic=topic, reason=reason, since=_utc(since), until=_utc(until)
    )
    if selection.empty and not all_letters:
        raise typer.BadParameter("name letters (offsets, --topic, --reason, --since, --until) or pass --all")
    servers, security = _kafka(bootstrap_servers)
    plans = asyncio.run(_replay(servers, selection, dry_run=dry_run, security=security))
    results = [
        {
            "offset": p.item.offset,
            "topic": p.topic,
            "verdict": p.verdict.value,
            "detail": p.detail,
            "published": not dry_run and p.verdict is Verdict.REPLAY,
        }
        for p in plans
    ]
    if output == "json":
        typer.echo(json.dumps(results, indent=2))
    else:
        for row in results:
            action = (
                "replayed"
                if row["published"]
                else ("would replay" if row["verdict"] == "replay" else "skipped")
            )
            typer.echo(f"{row['offset']:>8}  {action:<12}  {row['topic']}  {row['detail']}")
        typer.echo(
            f"{sum(1 for r in results if r['verdict'] == 'replay')} of {len(results)} replayable", err=True
        )
    if any(p.verdict is not Verdict.REPLAY for p in plans):
        raise typer.Exit(code=1)


async def _replay(
    servers: str, selection: Selection, *, dry_run: bool, security: KafkaSecurity
) -> list[ReplayPlan]:
    from gfs.services.platform.kafka.producer import EnvelopeProducer

    letters = await read_letters(servers, security)
    plans = [plan_replay(item) for item in letters if selection.matches(item)]
    if dry_run or not any(p.verdict is Verdict.REPLAY for p in plans):
        return plans
    async with EnvelopeProducer(
        bootstrap_servers=servers, client_id="gfs-deadletter-replay", security=security
    ) as producer:
        for plan in plans:
            if plan.verdict is Verdict.REPLAY:
                # One at a time, acked: records of one key keep the letters' order.
                await producer.send_raw(
                    plan.topic, value=plan.value or b"", key=plan.key, headers=plan.headers
                )
    return plans
