"""The partition a key lands on: the Java client's murmur2, checked against literal vectors.

The hashes are Kafka's own test vectors (org.apache.kafka.common.utils.UtilsTest#testMurmur2),
written here as literals; the partitions are `(hash & 0x7fffffff) % 6`, worked out by hand from
them, not by the code under test. The integration test checks the same thing against the broker.
"""

from __future__ import annotations

import pytest

from gfs.services.producers.partitioning import partition_for_key

# key -> (Java murmur2 as a signed int, partition of 6, partition of 3)
VECTORS = {
    b"21": (-973932308, 0, 0),
    b"foobar": (-790332482, 0, 0),
    b"a-little-bit-long-string": (-985981536, 2, 2),
    b"a-little-bit-longer-string": (-1486304829, 5, 2),
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (-58897971, 5, 2),
    b"abc": (479470107, 3, 0),
}


@pytest.mark.parametrize("key", list(VECTORS), ids=[k.decode()[:12] for k in VECTORS])
def test_partition_matches_the_java_clients_murmur2(key: bytes) -> None:
    java_hash, of_six, of_three = VECTORS[key]
    assert (java_hash & 0x7FFFFFFF) % 6 == of_six  # the literal table is self-consistent
    assert partition_for_key(key, 6) == of_six
    assert partition_for_key(key, 3) == of_three
    assert partition_for_key(key, 1) == 0


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"x", 0)
