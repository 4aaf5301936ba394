"""The transaction coordinator: transactional ids to producer ids and epochs, the partitions
and groups of the transaction under way, and its end, written as control batches (commit or
abort markers) into each partition's log, as Kafka's TransactionCoordinator does with one
replica. Offsets committed in a transaction (TxnOffsetCommit, served by the group
coordinator) land or are dropped when it ends: `on_end(producer id, committed)`.

Transaction version 1 (KIP-890 part 2's epoch bump per transaction is not served: EndTxn
stops at v4, and no transaction.version feature is advertised). A transaction still open after its timeout is aborted and its
producer's epoch bumped, which fences it (`expire`, from the broker's tick); so is one
found open by an InitProducerId, which is answered CONCURRENT_TRANSACTIONS (Kafka's
PrepareEpochFence: the client retries).
Each handler takes (apis, request, version, ctx) and returns a response object.
"""

import heapq

from .. import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)
from ..error_codes import by_name
from ._coordinator_records import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
)

MAX_EPOCH = 32767
NONE = 0


def code(name):
    return by_name(name).code


def fenced_for(error, version, first):
    """KIP-588: clients older than an API's version `first` know PRODUCER_FENCED as
    INVALID_PRODUCER_EPOCH, and are told so."""
    if error == "PRODUCER_FENCED" and version < first:
        return "INVALID_PRODUCER_EPOCH"
    return error


class Transaction:
    __slots__ = (
        "producer_id",
        "epoch",
        "ongoing",
        "partitions",
        "groups",
        "timeout_ms",
        "deadline",
        "ended",
        "updated",
        "transactional_id",
    )

    def __init__(self, producer_id, timeout_ms, transactional_id=None, now=0.0):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.epoch = 0
        self.ongoing = False
        self.partitions = set()  # (topic, partition) of the transaction under way
        self.groups = set()  # of AddOffsetsToTxn: their TxnOffsetCommits wait for the end
        self.timeout_ms = timeout_ms
        self.deadline = None  # on the coordinator's clock, while a transaction is under way
        # How the last transaction of this epoch ended: True committed, False aborted, None
        # none ended yet (Kafka's CompleteCommit, CompleteAbort, Empty).
        self.ended = None
        self.updated = now  # its last change, on the coordinator's clock (txnLastUpdateTimestamp)

    def begin(self, now):
        if not self.ongoing:
            self.ongoing = True
            self.deadline = now + self.timeout_ms / 1000


class TransactionCoordinator:
    """`limit`: how many transactional ids it keeps (None: no limit); InitProducerId for a
    new one past it is refused (POLICY_VIOLATION), those known go on. `max_timeout_ms`:
    Kafka's transaction.max.timeout.ms."""

    def __init__(self, cluster, clock, on_end=None, limit=None, max_timeout_ms=900_000):
        self.cluster = cluster
        self.clock = clock
        self.on_end = on_end  # on_end(producer id, committed): the group coordinator's offsets
        self.limit = limit
        self.max_timeout_ms = max_timeout_ms
        self.transactions = {}  # transactional id -> Transaction
        # (deadline, transactional id) of transactions under way, in a heap: the broker's tick
        # looks at the earliest, not at every transactional id (there may be 100,000)
        self._deadlines = []
        self.marked = []  # partitions given a marker since the caller last took them
        # on_change(Transaction, status): each new state of a transactional id, to be kept
        # (Kafka's TransactionLogValue; status as its TransactionState ids)
        self.on_change = None

    def _changed(self, txn, status):
        if self.on_change is not None:
            self.on_change(txn, status)

    def begin(self, transactional_id):
        """A transaction of `transactional_id` is under way (from its first partition or
        group added): its timeout runs from now. Called after each partition or group
        added."""
        txn = self.transactions[transactional_id]
        txn.updated = self.clock()
        if not txn.ongoing:
            txn.begin(txn.updated)
            heapq.heappush(self._deadlines, (txn.deadline, transactional_id))
            if len(self._deadlines) > 2 * len(self.transactions) + 64:  # ended ones: drop
                self._deadlines = [
                    (t.deadline, tid) for tid, t in self.transactions.items() if t.ongoing
                ]
                heapq.heapify(self._deadlines)
        self._changed(txn, ONGOING)  # with the partitions added so far

    def take_marked(self):
        """The partitions (Partition objects) given a marker since the last call: their last
        stable offset moved, so read_committed Fetches waiting on them may go on."""
        marked, self.marked = self.marked, []
        return marked

    def init(self, transactional_id, timeout_ms, producer_id=-1, epoch=-1, now_ms=0):
        """(producer id, epoch, error name or None) for InitProducerId with an id: a new
        epoch fences the producers before it; a transaction they left open is aborted and
        CONCURRENT_TRANSACTIONS answered (the caller retries), as Kafka's coordinator does."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return -1, -1, "INVALID_TRANSACTION_TIMEOUT"
        txn = self.transactions.get(transactional_id)
        if txn is None and self.limit is not None and len(self.transactions) >= self.limit:
            return -1, -1, "POLICY_VIOLATION"
        if txn is None:
            pid = self.cluster.producer_ids.new()
            txn = Transaction(pid, timeout_ms, transactional_id, self.clock())
            self.transactions[transactional_id] = txn
            self._changed(txn, EMPTY)
            return pid, 0, None
        txn.updated = self.clock()
        if producer_id != -1 and (producer_id, epoch) != (txn.producer_id, txn.epoch):
            if producer_id != txn.producer_id:
                return -1, -1, "INVALID_PRODUCER_ID_MAPPING"
            return -1, -1, "PRODUCER_FENCED"
        if txn.ongoing:
            # Kafka's PrepareEpochFence: the epoch is bumped (fencing the producer that left
            # the transaction open), the transaction aborted with its markers at that epoch,
            # and the caller told CONCURRENT_TRANSACTIONS: its retry bumps the epoch again.
            self._fence(txn)
            self._finish(txn, commit=False, now_ms=now_ms)
            return -1, -1, "CONCURRENT_TRANSACTIONS"
        txn.timeout_ms = timeout_ms
        txn.ended = None
        if txn.epoch >= MAX_EPOCH - 1:  # the epoch is an int16: a new producer id past it
            txn.producer_id = self.cluster.producer_ids.new()
            txn.epoch = 0
        else:
            txn.epoch += 1
        self._changed(txn, EMPTY)
        return txn.producer_id, txn.epoch, None

    def check(self, transactional_id, producer_id, epoch):
        """The error name for a request of this producer (None: it may go on)."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return "INVALID_PRODUCER_ID_MAPPING"
        if epoch != txn.epoch:
            return "PRODUCER_FENCED"
        return None

    def verify(self, transactional_id, producer_id, epoch, topic, index):
        """KIP-890 part 1, as a partition leader asks before a producer's first transactional
        batch there: the coordinator's error name (None: the partition is in the producer's
        transaction under way)."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return "INVALID_PRODUCER_ID_MAPPING"
        if epoch != txn.epoch:
            return "PRODUCER_FENCED"
        if not txn.ongoing or (topic, index) not in txn.partitions:
            return "TRANSACTION_ABORTABLE"
        return None

    def end(self, transactional_id, producer_id, epoch, commit, now_ms):
        error = self.check(transactional_id, producer_id, epoch)
        if error is not None:
            return error
        txn = self.transactions[transactional_id]
        if not txn.ongoing:
            # A retry of the end just made is answered again; any other end of a transaction
            # not under way (nothing added since InitProducerId, or the other outcome) is
            # refused, as Kafka's coordinator refuses it.
            return None if txn.ended is commit else "INVALID_TXN_STATE"
        self._finish(txn, commit, now_ms)
        return None

    def _finish(self, txn, commit, now_ms):
        self._changed(txn, PREPARE_COMMIT if commit else PREPARE_ABORT)
        for topic, index in sorted(txn.partitions):
            partition = self.cluster.partition(topic, index)
            if partition is not None:
                partition.log.write_marker(txn.producer_id, txn.epoch, commit, now_ms)
                self.marked.append(partition)
        if txn.groups and self.on_end is not None:
            self.on_end(txn.producer_id, commit)  # its TxnOffsetCommits land or are dropped
        txn.ongoing = False
        txn.ended = bool(commit)
        txn.updated = self.clock()
        txn.deadline = None
        txn.partitions.clear()
        txn.groups.clear()
        self._changed(txn, COMPLETE_COMMIT if commit else COMPLETE_ABORT)

    def expire(self, now_ms):
        """Abort the transactions past their timeout, bumping their epoch so that their
        producer is fenced, as Kafka's coordinator does; returns (how many were aborted, the
        next deadline or None)."""
        now = self.clock()
        aborted = 0
        heap = self._deadlines
        while heap:
            deadline, tid = heap[0]
            txn = self.transactions.get(tid)
            if txn is None or txn.deadline != deadline:  # ended, or begun again since
                heapq.heappop(heap)
                continue
            if deadline > now:
                return aborted, deadline
            heapq.heappop(heap)
            self._fence(txn)  # the markers carry the fenced epoch, as Kafka's do
            self._finish(txn, commit=False, now_ms=now_ms)
            aborted += 1
        return aborted, None

    def restore(
        self, transactional_id, producer_id, epoch, timeout_ms, status, partitions, updated=None
    ):
        """A transactional id's state read back (the last TransactionLogValue kept): a
        transaction it left under way is added to, to be settled by `settle_restored`.
        `updated`: its last change on this coordinator's clock (None: now)."""
        now = self.clock()
        txn = Transaction(
            producer_id, timeout_ms, transactional_id, now if updated is None else updated
        )
        txn.epoch = epoch
        txn.ended = {COMPLETE_COMMIT: True, COMPLETE_ABORT: False}.get(status)
        if status not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):  # under way or ending
            txn.ongoing = True
            txn.partitions.update(partitions)
        self.transactions[transactional_id] = txn
        return txn

    def settle_restored(self, prepared, now_ms):
        """After a restart: the transactions restored as under way end as Kafka's coordinator
        ends them on load: one that was committing or aborting (`prepared`: transactional
        id -> commit) completes; one still open is aborted and its producer fenced (its epoch
        bumped, the markers at that epoch), as its timeout would, but now. Returns the
        transactional ids settled."""
        settled = []
        for tid, txn in self.transactions.items():
            if not txn.ongoing:
                continue
            if tid not in prepared:
                self._fence(txn)
            self._finish(txn, prepared.get(tid, False), now_ms)
            settled.append(tid)
        return settled

    def forget_idle(self, expiration_ms):
        """Forget the transactional ids with no transaction under way whose last change is
        `expiration_ms` or more ago (Kafka's transactional.id.expiration.ms): the next
        InitProducerId of one gets a new producer id. Returns how many."""
        now = self.clock()
        gone = [
            tid
            for tid, txn in self.transactions.items()
            if not txn.ongoing and (now - txn.updated) * 1000 >= expiration_ms
        ]
        for tid in gone:
            self._changed(self.transactions.pop(tid), DEAD)  # as Kafka writes it: Dead
        return len(gone)

    @staticmethod
    def _fence(txn):
        """Bump the epoch of a transaction about to be aborted by the coordinator (Kafka's
        prepareFenceProducerEpoch); at the int16's top, the next InitProducerId gives a new
        producer id."""
        if txn.epoch < MAX_EPOCH:
            txn.epoch += 1


# ---------------------------------------------------------------- the handlers


def add_partitions_to_txn(apis, request, version, ctx):
    R = AddPartitionsToTxnResponse
    if version >= 4:  # brokers verifying for each other (KIP-890): not a client's request
        return R(error_code=code("UNSUPPORTED_VERSION"), results_by_transaction=[])
    txns = apis.transactions
    tid = request.v3_and_below_transactional_id
    error = txns.check(tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch)
    error = fenced_for(error, version, 2)
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {(t, p) for t, p in wanted if apis.cluster.partition(t, p) is None}
    if error is None and not unknown:
        txns.transactions[tid].partitions.update(wanted)
        txns.begin(tid)

    def result(t, p):
        if error is not None:
            return code(error)
        if unknown:  # all or nothing: the others were not attempted
            return code(
                "UNKNOWN_TOPIC_OR_PARTITION" if (t, p) in unknown else "OPERATION_NOT_ATTEMPTED"
            )
        return NONE

    return R(
        results_by_topic_v3_and_below=[
            R.AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    R.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=result(t.name, p)
                    )
                    for p in t.partitions
                ],
            )
            for t in request.v3_and_below_topics
        ]
    )


def add_offsets_to_txn(apis, request, version, ctx):
    txns = apis.transactions
    error = txns.check(request.transactional_id, request.producer_id, request.producer_epoch)
    error = fenced_for(error, version, 2)
    if error is None:
        txns.transactions[request.transactional_id].groups.add(request.group_id)
        txns.begin(request.transactional_id)
    return AddOffsetsToTxnResponse(error_code=NONE if error is None else code(error))


def end_txn(apis, request, version, ctx):
    error = apis.transactions.end(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        int(apis.wall_clock() * 1000),
    )
    # the last stable offset moved: read_committed Fetches waiting on it may go on
    apis.data_arrived(apis.transactions.take_marked())
    error = fenced_for(error, version, 2)
    return EndTxnResponse(error_code=NONE if error is None else code(error))


# (request class, Kafka 4.x's lowest version, highest, handler)
HANDLERS = (
    (AddPartitionsToTxnRequest, 0, 3, add_partitions_to_txn),
    (AddOffsetsToTxnRequest, 0, 4, add_offsets_to_txn),
    (EndTxnRequest, 0, 4, end_txn),
)
