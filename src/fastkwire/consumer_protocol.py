"""The consumer protocol's assignment bytes (ConsumerProtocolAssignment, versions 0-3), and
the topics of a subscription (ConsumerProtocolSubscription).

Classic consumer groups (protocol type "consumer") carry each member's assignment as opaque
bytes in SyncGroup and DescribeGroups; the layout is Kafka's non-flexible encoding:

    int16 version
    int32 count, then per topic: int16-length string topic, int32 count, then int32 partitions
    int32-length bytes user_data (-1: null)

Versions 1-3 changed only the subscription, not the assignment. The bytes come from a
broker, so counts are checked against the bytes left before anything is allocated.
"""

import struct

__all__ = ["decode_assignment", "decode_subscription", "encode_assignment", "encode_subscription"]


class _Reader:
    def __init__(self, data):
        self.data = bytes(data)
        self.pos = 0

    def take(self, fmt, what):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"assignment ends inside {what} at offset {self.pos}")
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def count(self, what, item_size):
        n = self.take(">i", what)
        if n < 0 or n * item_size > len(self.data) - self.pos:
            raise ValueError(
                f"{what} of {n} at offset {self.pos - 4} does not fit in the "
                f"{len(self.data) - self.pos} bytes left"
            )
        return n

    def string(self, what):
        n = self.take(">h", what)
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{what} of {n} bytes at offset {self.pos - 2} does not fit")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{what} at offset {self.pos - n} is not UTF-8") from None


def decode_assignment(data):
    """bytes -> {topic: sorted partitions}; ValueError naming the offset for bad bytes.

    Empty bytes (a member between rebalances) give {}; user data is ignored.
    """
    if not data:
        return {}
    r = _Reader(data)
    version = r.take(">h", "the version")
    if version < 0:
        raise ValueError(f"assignment version {version} at offset 0")
    topics = {}
    for _ in range(r.count("the topic count", 6)):
        topic = r.string("a topic name")
        partitions = [r.take(">i", "a partition") for _ in range(r.count("a partition count", 4))]
        topics.setdefault(topic, []).extend(partitions)
    # user_data and, from newer versions, fields we do not need: left unread.
    return {t: sorted(p) for t, p in topics.items()}


def encode_assignment(topics, version=0, user_data=None):
    """{topic: partitions} -> the assignment bytes (for tests and tools)."""
    out = [struct.pack(">hi", version, len(topics))]
    for topic, partitions in topics.items():
        name = topic.encode("utf-8")
        out.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(partitions)))
        out.extend(struct.pack(">i", p) for p in partitions)
    out.append(
        struct.pack(">i", -1)
        if user_data is None
        else struct.pack(">i", len(user_data)) + user_data
    )
    return b"".join(out)


def decode_subscription(data):
    """A subscription's bytes -> its topics, in order; ValueError naming the offset for bad
    bytes. Every version starts as version 0 does (int16 version, then the topic names), so
    the rest (user data, owned partitions, generation, rack) is left unread."""
    r = _Reader(data)
    version = r.take(">h", "the version")
    if version < 0:
        raise ValueError(f"subscription version {version} at offset 0")
    return [r.string("a topic name") for _ in range(r.count("the topic count", 2))]


def encode_subscription(topics, user_data=None):
    """topics -> version 0 subscription bytes (for tests and tools)."""
    out = [struct.pack(">hi", 0, len(topics))]
    for topic in topics:
        name = topic.encode("utf-8")
        out.append(struct.pack(">h", len(name)) + name)
    out.append(
        struct.pack(">i", -1)
        if user_data is None
        else struct.pack(">i", len(user_data)) + user_data
    )
    return b"".join(out)
