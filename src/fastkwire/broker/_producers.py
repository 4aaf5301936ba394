"""The producer-state table: producer ids, their epochs, and per partition the sequences of
the last batches each producer wrote, for the idempotent producer's checks (Kafka's
ProducerStateManager / ProducerAppendInfo, one replica).

A batch with a producer id is checked before it is appended:
- an epoch older than the one known is refused (INVALID_PRODUCER_EPOCH);
- a batch equal to one of the last five written is a duplicate: acknowledged with the offset
  it got the first time, not appended again;
- otherwise its first sequence must follow the last one written (0 for a new epoch), or it
  is refused (OUT_OF_ORDER_SEQUENCE_NUMBER); a producer the partition does not know (new,
  or forgotten) may start at any sequence, as Kafka 4 accepts it (no UNKNOWN_PRODUCER_ID).

A producer whose last batch here is older than producer.id.expiration.ms (by its timestamp,
as Kafka's ProducerStateManager compares) and has no transaction open is forgotten
(`expire`).
"""

import collections

from ._log import LogError

PRODUCER_ID_BLOCK = 1000  # ids kept per block, as Kafka's controller allocates them
CACHED_BATCHES = 5  # Kafka keeps the metadata of a producer's last 5 batches per partition
_INT31 = 1 << 31


class ProducerIds:
    """Hands out producer ids: a new one for every InitProducerId without a transactional id
    (Kafka's coordinator answers those with a new id at epoch 0 whatever id and epoch they
    name: an idempotent producer bumps its own epoch, KIP-360), and for transactional ids."""

    def __init__(self):
        self._next = 1000
        # on_block(end): ids up to `end` (exclusive) are about to be handed out: kept, so
        # that a restart starts past them (Kafka's controller hands out blocks of 1000 ids
        # and keeps each in its metadata log). None: nothing is kept.
        self.on_block = None
        self._block_end = None

    def start_at(self, first):
        """Hand out no id below `first` (ids a broker before a restart may have given)."""
        self._next = max(self._next, first)

    def new(self):
        """A producer id never handed out before."""
        pid = self._next
        self._next += 1
        if self.on_block is not None and (self._block_end is None or pid >= self._block_end):
            self._block_end = pid + PRODUCER_ID_BLOCK
            self.on_block(self._block_end)
        return pid


class PartitionProducers:
    """The producers of one partition: their epoch, last batches' (first sequence, last
    sequence, base offset) and last batch's timestamp."""

    __slots__ = ("_state",)

    def __init__(self):
        # producer id -> [epoch, deque of (first seq, last seq, base offset), last timestamp]
        self._state = {}

    def __len__(self):
        return len(self._state)

    def __contains__(self, producer_id):
        return producer_id in self._state

    def expire(self, now_ms, expiration_ms, keep=()):
        """Forget the producers whose last batch's timestamp is `expiration_ms` or more
        before `now_ms`, but those in `keep` (a transaction open); returns how many."""
        gone = [
            pid
            for pid, entry in self._state.items()
            if now_ms - entry[2] >= expiration_ms and pid not in keep
        ]
        for pid in gone:
            del self._state[pid]
        return len(gone)

    def check(self, head):
        """Before appending a batch: the base offset of the duplicate it is (nothing is to be
        appended then), or None to append it; LogError when it is refused."""
        pid = head.producer_id
        if pid < 0:
            return None
        entry = self._state.get(pid)
        first, last = head.base_sequence, head.last_sequence
        if entry is None:
            return None  # unknown (new, or expired): any sequence, as Kafka 4
        epoch, batches, _ = entry
        if head.producer_epoch < epoch:
            raise LogError(
                "INVALID_PRODUCER_EPOCH",
                f"producer {pid}'s epoch {head.producer_epoch} is older than {epoch}",
            )
        if head.producer_epoch > epoch:
            if first != 0:
                raise _out_of_order(pid, first, 0)
            return None
        for seen_first, seen_last, base in batches:
            if seen_first == first and seen_last == last:
                return base
        expected = (batches[-1][1] + 1) % _INT31 if batches else 0
        if first != expected:
            raise _out_of_order(pid, first, expected)
        return None

    def appended(self, head, base_offset, timestamp=None):
        """`timestamp`: the batch's max timestamp as written (LogAppendTime: the append's)."""
        pid = head.producer_id
        if pid < 0:
            return
        entry = self._state.get(pid)
        if entry is None or entry[0] != head.producer_epoch:
            entry = self._state[pid] = [
                head.producer_epoch,
                collections.deque(maxlen=CACHED_BATCHES),
                0,
            ]
        entry[1].append((head.base_sequence, head.last_sequence, base_offset))
        entry[2] = head.max_timestamp if timestamp is None else timestamp


def _out_of_order(pid, got, expected):
    return LogError(
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        f"producer {pid}: sequence {got} arrived where {expected} was expected",
    )
