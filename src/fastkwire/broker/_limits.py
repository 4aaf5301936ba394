"""What one client may make the broker hold or do, beside the connection caps: each limit
is Kafka's where Kafka has one (its default too), and a cap of ours where Kafka has none
but a client could otherwise grow the broker's memory or work without bound. A request past
a limit gets Kafka's error for it (POLICY_VIOLATION where Kafka has none of its own); only
that request is refused.
"""

from dataclasses import dataclass

# Kafka's fetch.max.bytes: the most a Fetch is answered with, whatever max_bytes it asks.
DEFAULT_FETCH_MAX_BYTES = 57_671_680


@dataclass
class Limits:
    """`fetch_max_bytes`: Kafka's fetch.max.bytes (a Fetch's max_bytes is lowered to it);
    `max_acls`: ACLs kept (CreateAcls past it: POLICY_VIOLATION); `max_transactional_ids`:
    transactional ids known (InitProducerId for a new one past it: POLICY_VIOLATION);
    `transaction_max_timeout_ms`: Kafka's transaction.max.timeout.ms (InitProducerId asking
    for a longer transaction timeout, or one not above 0: INVALID_TRANSACTION_TIMEOUT, as
    Kafka answers; a transaction left open holds read_committed consumers back that long)."""

    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    max_acls: int = 100_000
    max_transactional_ids: int = 100_000
    transaction_max_timeout_ms: int = 900_000

    def __post_init__(self):
        for name in (
            "fetch_max_bytes",
            "max_acls",
            "max_transactional_ids",
            "transaction_max_timeout_ms",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: a positive integer, not {value!r}")
        if self.fetch_max_bytes < 1024:
            raise ValueError(
                f"fetch_max_bytes: at least 1024 (as Kafka's), not {self.fetch_max_bytes}"
            )


# Kafka's max.request.partition.size.limit: the most partitions a DescribeTopicPartitions
# answers, whatever response_partition_limit asks.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000


def unique(items, key=None):
    """`items` without the repeats (by `key`), in the order first seen. A request naming
    one thing many times is answered about it once, as Kafka answers (its handlers read the
    names into sets): otherwise a few bytes asked again and again could make the broker
    build an answer thousands of times the request's size."""
    seen = {}
    for item in items:
        seen.setdefault(item if key is None else key(item), item)
    return list(seen.values())
