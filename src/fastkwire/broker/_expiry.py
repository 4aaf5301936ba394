"""Kafka's periodic forgetting of producer state, on the broker's timers:

- every `producer_id_expiration_check_interval_ms` (Kafka's
  producer.id.expiration.check.interval.ms, 10 minutes), each partition forgets the
  producers whose last batch's timestamp is `producer_id_expiration_ms`
  (producer.id.expiration.ms, 1 day) or more old and that have no transaction open there:
  their next batch may start at any sequence, and a retry of an old one is written again;
- every `transactional_id_cleanup_interval_ms` (transaction.remove.expired.transaction.
  cleanup.interval.ms, 1 hour), the transaction coordinator forgets the transactional ids
  with no transaction under way unchanged for `transactional_id_expiration_ms`
  (transactional.id.expiration.ms, 7 days): their next InitProducerId gets a new producer id.
"""

from ._timers import Timers

PRODUCER_ID_EXPIRATION_MS = 86_400_000
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000
TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000
TRANSACTIONAL_ID_CLEANUP_INTERVAL_MS = 3_600_000


def _positive_ms(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: a positive number of milliseconds, not {value!r}")
    return value


class StateExpiry:
    """Fires the two checks above from `tick()` (the broker's, on `clock`, in seconds);
    producers' timestamps are compared with `wall_clock` (seconds), as Kafka compares them
    with its own time."""

    def __init__(
        self,
        cluster,
        transactions,
        clock,
        wall_clock,
        producer_id_expiration_ms=PRODUCER_ID_EXPIRATION_MS,
        producer_id_expiration_check_interval_ms=PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
        transactional_id_expiration_ms=TRANSACTIONAL_ID_EXPIRATION_MS,
        transactional_id_cleanup_interval_ms=TRANSACTIONAL_ID_CLEANUP_INTERVAL_MS,
    ):
        self.cluster = cluster
        self.transactions = transactions
        self.wall_clock = wall_clock
        self.producer_id_expiration_ms = _positive_ms(
            producer_id_expiration_ms, "producer_id_expiration_ms"
        )
        self.producer_check_ms = _positive_ms(
            producer_id_expiration_check_interval_ms, "producer_id_expiration_check_interval_ms"
        )
        self.transactional_id_expiration_ms = _positive_ms(
            transactional_id_expiration_ms, "transactional_id_expiration_ms"
        )
        self.transactional_check_ms = _positive_ms(
            transactional_id_cleanup_interval_ms, "transactional_id_cleanup_interval_ms"
        )
        # overrides(node id): producer.id.expiration.ms as changed at run time for the node
        # leading a partition (None: not changed)
        self.overrides = None
        self.timers = Timers(clock)
        self.timers.schedule("producers", self.producer_check_ms, self.expire_producers)
        self.timers.schedule(
            "transactional ids", self.transactional_check_ms, self.expire_transactional_ids
        )

    def tick(self):
        """Run the checks that are due; the next one's deadline."""
        return self.timers.fire()

    def expire_producers(self):
        now_ms = int(self.wall_clock() * 1000)
        forgotten = 0
        for partition in self.cluster.all_partitions():
            if len(partition.producers):
                ms = None if self.overrides is None else self.overrides(partition.leader)
                forgotten += partition.producers.expire(
                    now_ms,
                    self.producer_id_expiration_ms if ms is None else ms,
                    partition.log.ongoing,
                )
        self.timers.schedule("producers", self.producer_check_ms, self.expire_producers)
        return forgotten

    def expire_transactional_ids(self):
        forgotten = self.transactions.forget_idle(self.transactional_id_expiration_ms)
        self.timers.schedule(
            "transactional ids", self.transactional_check_ms, self.expire_transactional_ids
        )
        return forgotten
