"""Which partition a Kafka key lands on, exactly as the producers compute it.

aiokafka's `DefaultPartitioner` (the one `EnvelopeProducer` uses) is the Java client's: murmur2 of
the key bytes, sign bit cleared, modulo the partition count. A reader that wants one key's records
(`GfsClient.follow`) reads only that partition, so it must compute the same number.
"""

from __future__ import annotations

from aiokafka.partitioner import murmur2


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition (0-based) a record keyed `key` lands on in a topic of `partitions` partitions."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition (got {partitions})")
    return (int(murmur2(key)) & 0x7FFFFFFF) % partitions
