"""The transaction coordinator: transactional ids to producer ids and epochs, the partitions
and groups of the transaction under way, and its end, written as control batches (commit or
abort markers) into each partition's log, as Kafka's TransactionCoordinator does with one
replica. Offsets committed in a transaction (TxnOffsetCommit, served by the group
coordinator) land or are dropped when it ends: `on_end(producer id, committed)`.

Transaction version 1 (KIP-890 part 2's epoch bump per transaction is not served: EndTxn
stops at v4, and no transaction.version feature is advertised). A transaction still open after its timeout is aborted and its
producer's epoch bumped, which fences it (`expire`, from the broker's tick).
Each handler takes (apis, request, version, ctx) and returns a response object.
"""

from .. import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)
from ..error_codes import by_name

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
    )

    def __init__(self, producer_id, timeout_ms):
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

    def begin(self, now):
        if not self.ongoing:
            self.ongoing = True
            self.deadline = now + self.timeout_ms / 1000


class TransactionCoordinator:
    def __init__(self, cluster, clock, on_end=None):
        self.cluster = cluster
        self.clock = clock
        self.on_end = on_end  # on_end(producer id, committed): the group coordinator's offsets
        self.transactions = {}  # transactional id -> Transaction

    def init(self, transactional_id, timeout_ms, producer_id=-1, epoch=-1, now_ms=0):
        """(producer id, epoch, error name or None) for InitProducerId with an id: a new
        epoch fences the producers before it, and a transaction they left is aborted."""
        txn = self.transactions.get(transactional_id)
        if txn is None:
            pid, _, _ = self.cluster.producer_ids.init()
            txn = self.transactions[transactional_id] = Transaction(pid, timeout_ms)
            return pid, 0, None
        if producer_id != -1 and (producer_id, epoch) != (txn.producer_id, txn.epoch):
            if producer_id != txn.producer_id:
                return -1, -1, "INVALID_PRODUCER_ID_MAPPING"
            return -1, -1, "PRODUCER_FENCED"
        if txn.ongoing:
            self._finish(txn, commit=False, now_ms=now_ms)
        txn.timeout_ms = timeout_ms
        txn.ended = None
        if txn.epoch >= MAX_EPOCH - 1:  # the epoch is an int16: a new producer id past it
            txn.producer_id, _, _ = self.cluster.producer_ids.init()
            txn.epoch = 0
        else:
            txn.epoch += 1
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
        for topic, index in sorted(txn.partitions):
            partition = self.cluster.partition(topic, index)
            if partition is not None:
                partition.log.write_marker(txn.producer_id, txn.epoch, commit, now_ms)
        if txn.groups and self.on_end is not None:
            self.on_end(txn.producer_id, commit)  # its TxnOffsetCommits land or are dropped
        txn.ongoing = False
        txn.ended = bool(commit)
        txn.deadline = None
        txn.partitions.clear()
        txn.groups.clear()

    def expire(self, now_ms):
        """Abort the transactions past their timeout, bumping their epoch so that their
        producer is fenced, as Kafka's coordinator does; returns (how many were aborted, the
        next deadline or None)."""
        now = self.clock()
        deadlines = []
        aborted = 0
        for txn in self.transactions.values():
            if txn.deadline is None:
                continue
            if txn.deadline <= now:
                self._finish(txn, commit=False, now_ms=now_ms)
                aborted += 1
                if txn.epoch < MAX_EPOCH - 1:
                    txn.epoch += 1
            else:
                deadlines.append(txn.deadline)
        return aborted, min(deadlines, default=None)


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
        txn = txns.transactions[tid]
        txn.partitions.update(wanted)
        txn.begin(txns.clock())

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
        txn = txns.transactions[request.transactional_id]
        txn.groups.add(request.group_id)
        txn.begin(txns.clock())
    return AddOffsetsToTxnResponse(error_code=NONE if error is None else code(error))


def end_txn(apis, request, version, ctx):
    error = apis.transactions.end(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        int(apis.wall_clock() * 1000),
    )
    if error is None:
        apis.data_arrived()  # the last stable offset moved: read_committed Fetches may go on
    error = fenced_for(error, version, 2)
    return EndTxnResponse(error_code=NONE if error is None else code(error))


# (request class, Kafka 4.x's lowest version, highest, handler)
HANDLERS = (
    (AddPartitionsToTxnRequest, 0, 3, add_partitions_to_txn),
    (AddOffsetsToTxnRequest, 0, 4, add_offsets_to_txn),
    (EndTxnRequest, 0, 4, end_txn),
)
