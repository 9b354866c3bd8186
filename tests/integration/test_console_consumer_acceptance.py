"""Acceptance: what the project puts on Kafka is plain JSON that a non-Python tool reads and that
validates against the exported JSON Schema of its topic.

Kafka's own ConsoleConsumer (through infra/kafka/console-consumer.sh) reads the records back; the
`jsonschema` library validates them against `gfs schemas export` output.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from kafka_harness import consume_until
from payload_examples import task_submitted

from gfs.schemas.envelope import wrap
from gfs.schemas.topics import DEAD_LETTER_TOPIC, topic
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.schema_cli import export, schema_file_name
from gfs.services.platform.settings import REPO_ROOT

pytestmark = pytest.mark.integration

CONSOLE_CONSUMER = REPO_ROOT / "infra" / "kafka" / "console-consumer.sh"
SUBMIT = "gfs.tasks.submit"


@pytest.fixture(scope="module")
def exported_schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("json-schemas")
    export(directory)
    return directory


def _validator(exported: Path, topic_name: str) -> Draft202012Validator:
    schema = json.loads((exported / schema_file_name(topic(topic_name))).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _console_consume(bootstrap: str, *args: str) -> list[dict[str, Any]]:
    command = [str(CONSOLE_CONSUMER), "--bootstrap-server", bootstrap, "--max-messages", "1"]
    # Generous: on a loaded 2-core CI machine the JVM alone can take tens of seconds to start.
    command += ["--timeout-ms", "60000", *args]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=150, check=True)
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, (
        f"expected one record, got stdout={completed.stdout!r} stderr={completed.stderr[-2000:]!r}"
    )
    return [json.loads(line) for line in lines]


async def test_a_produced_task_submission_reads_back_as_schema_valid_json(
    registry_topics: TopicsReport, kafka_bootstrap: str, exported_schemas: Path
) -> None:
    sent = wrap(task_submitted(f"job-{uuid.uuid4().hex[:8]}"), producer="it-acceptance")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        at = await producer.send(SUBMIT, sent)

    # --partition/--offset point the tool at exactly our record (the topic holds others too).
    [document] = _console_consume(kafka_bootstrap, "--topic", SUBMIT, "--partition", str(at.partition),
                                  "--offset", str(at.offset))  # fmt: skip
    _validator(exported_schemas, SUBMIT).validate(document)
    assert document["event_id"] == str(sent.event_id)
    assert document["payload"]["task_id"] == sent.payload.task_id


async def test_the_first_dead_letter_reads_back_from_the_beginning_as_schema_valid_json(
    registry_topics: TopicsReport, kafka_bootstrap: str, exported_schemas: Path, unique_group: str
) -> None:
    # Make sure the project's consumer has produced at least one dead letter.
    # The bad record and the marker share a key, so they land on one partition in that order: once
    # the consumer has handled the marker it has already dead-lettered the bad record before it.
    marker = wrap(task_submitted(f"job-{uuid.uuid4().hex[:8]}"), producer="it-acceptance")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        await producer.send_raw(SUBMIT, value=b"definitely not json", key=marker.payload.task_id.encode())
        await producer.send(SUBMIT, marker)
    await consume_until(
        SUBMIT, unique_group, bootstrap_servers=kafka_bootstrap,
        done=lambda got: marker.event_id in got.event_ids(),
    )  # fmt: skip

    # Only project code publishes on gfs.deadletter (the platform consumer, and the round-trip
    # test with its DeadLetter example), so whichever record is first, the project produced it.
    # Read by partition (the dead-letter topic has one) from the earliest offset: an assigned read
    # needs no consumer group, so it does not wait on the group coordinator of a freshly started
    # broker (which timed out under load in CI with --from-beginning).
    assert topic(DEAD_LETTER_TOPIC).partitions == 1
    [document] = _console_consume(kafka_bootstrap, "--topic", DEAD_LETTER_TOPIC, "--partition", "0",
                                  "--offset", "earliest")  # fmt: skip
    _validator(exported_schemas, DEAD_LETTER_TOPIC).validate(document)
    assert document["event_type"] == "DeadLetter"


def test_an_invalid_document_fails_the_exported_schema(exported_schemas: Path) -> None:
    # Guards the acceptance checks above against a vacuous schema that accepts anything.
    document = json.loads(wrap(task_submitted("job-x"), producer="p").model_dump_json())
    document["payload"]["workers"] = 0
    assert not _validator(exported_schemas, SUBMIT).is_valid(document)
