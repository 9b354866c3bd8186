"""Kafka adapters: envelope producer, consumer loop with dead letters, topic administration.

One module per concept (producer, consumer, processing, dead_letter, topic_admin); this package only
re-exports their public names so services write `from gfs.services.platform.kafka import consume`.
"""

from gfs.services.platform.kafka.consumer import consume
from gfs.services.platform.kafka.dead_letter import FailedRecord, build_dead_letter, describe_error
from gfs.services.platform.kafka.processing import (
    NO_RETRY,
    ConsumeStats,
    EnvelopeSink,
    Handler,
    HandlerFailedError,
    MessageContext,
    RecordProcessor,
    RetryPolicy,
)
from gfs.services.platform.kafka.producer import EnvelopeProducer, WrongTopicError
from gfs.services.platform.kafka.topic_admin import TopicsReport, ensure_topics, new_topic

__all__ = [
    "NO_RETRY",
    "ConsumeStats",
    "EnvelopeProducer",
    "EnvelopeSink",
    "FailedRecord",
    "Handler",
    "HandlerFailedError",
    "MessageContext",
    "RecordProcessor",
    "RetryPolicy",
    "TopicsReport",
    "WrongTopicError",
    "build_dead_letter",
    "consume",
    "describe_error",
    "ensure_topics",
    "new_topic",
]
