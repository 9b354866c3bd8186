"""Every registry topic: a valid example produced through the platform producer comes back through
the platform consumer, decoded, with its registry key and the producer's trace."""

from __future__ import annotations

import pytest
from kafka_harness import consume_until, start_at_end
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from payload_examples import all_examples

from gfs.schemas.envelope import wrap
from gfs.schemas.topics import TOPICS, TopicSpec, key_of
from gfs.services.platform.kafka.producer import EnvelopeProducer, WrongTopicError
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("spec", TOPICS, ids=[spec.name for spec in TOPICS])
async def test_each_payload_type_round_trips_on_its_topic(
    spec: TopicSpec, registry_topics: TopicsReport, kafka_bootstrap: str, unique_group: str
) -> None:
    examples = all_examples()
    sent = [
        wrap(examples[payload_type.__name__], producer="it-roundtrip") for payload_type in spec.payload_types
    ]
    # A local SDK tracer: the producer injects the current span's context into the headers.
    tracer = TracerProvider().get_tracer("it")
    await start_at_end(kafka_bootstrap, {unique_group: [spec.name]})  # only what this test sends
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        with tracer.start_as_current_span("produce") as span:
            for envelope in sent:
                await producer.send(spec.name, envelope)
    trace_id = span.get_span_context().trace_id
    wanted = {envelope.event_id for envelope in sent}

    received, stats = await consume_until(
        spec.name, unique_group, bootstrap_servers=kafka_bootstrap,
        done=lambda got: wanted <= got.event_ids(),
    )  # fmt: skip

    by_id = {envelope.event_id: (envelope, context) for envelope, context in received.items}
    for envelope in sent:
        got, context = by_id[envelope.event_id]
        assert got == envelope  # same payload type, same values, same envelope fields
        assert context.key == key_of(envelope)
        assert context.topic == spec.name
        assert trace.get_current_span(context.trace_context).get_span_context().trace_id == trace_id
    assert stats.handled >= len(sent)


async def test_producer_refuses_a_payload_on_the_wrong_topic(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    envelope = wrap(all_examples()["SpotQuota"], producer="it-roundtrip")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        with pytest.raises(WrongTopicError, match=r"SpotQuota cannot be published on gfs\.tasks\.submit"):
            await producer.send("gfs.tasks.submit", envelope)
