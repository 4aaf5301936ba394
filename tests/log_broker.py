"""A small broker of our own that serves a prebuilt log: ApiVersions, Metadata,
ListOffsets and Fetch, answered with fastkwire's codec from record batches held in memory. It is read-only: every
Produce is refused (INVALID_REQUEST). Real clients read from it too (confluent-kafka,
kafka-python, Ray Data's reader: test_kafka_arrow_clients.py).

For the readers' tests (faults a real broker will not make on demand: moved leaders,
fenced epochs, offsets out of range, corrupt batches, a broker that goes away, aborted
transactions with their markers) and for throughput benchmarks (a broker that serves as
fast as memory, so the reader is what is measured). Several LogBrokers can make one
cluster: `cluster([...])` gives them distinct node ids and spreads the leaders.

    python tests/log_broker.py --records 1000000 --partitions 4 --value-size 100
prints "PORT" on stdout once listening (another process: a benchmark's broker).
"""

import bisect
import socket
import struct
import sys
import threading

from fastkwire import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    decode_request,
    encode_response,
)

SUPPORTED = {
    ApiVersionsRequest.API_KEY: (0, 3),
    MetadataRequest.API_KEY: (0, 12),
    ListOffsetsRequest.API_KEY: (0, 7),
    FetchRequest.API_KEY: (4, 12),
    # Listed only because librdkafka (confluent-kafka, Ray's reader) fetches with Fetch v4+
    # only from a broker that lists Produce v3+; every Produce is refused (read-only log).
    ProduceRequest.API_KEY: (3, 9),
}
INVALID_REQUEST = 42
NOT_LEADER_OR_FOLLOWER = 6
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
CLOSE = "close"  # a fault's answer: close the connection instead of answering


class PartitionLog:
    """One partition's batches back to back, with where each starts and what it holds."""

    def __init__(self, batches, aborted=()):
        self.data = b"".join(batches)
        self.starts, self.last_offsets, self.max_ts = [], [], []
        pos = 0
        for b in batches:
            base = struct.unpack_from(">q", b, 0)[0]
            delta = struct.unpack_from(">i", b, 23)[0]
            self.starts.append(pos)
            self.last_offsets.append(base + delta)
            self.max_ts.append(struct.unpack_from(">q", b, 35)[0])
            pos += len(b)
        self.starts.append(pos)
        self.log_start = struct.unpack_from(">q", batches[0], 0)[0] if batches else 0
        self.end = self.last_offsets[-1] + 1 if batches else 0
        self.aborted = list(aborted)  # (producer_id, first_offset)

    def read(self, offset, most):
        """The batches from the one holding `offset`, at most `most` bytes but at least one."""
        i = bisect.bisect_left(self.last_offsets, offset)
        if i >= len(self.last_offsets):
            return b""
        start = self.starts[i]
        j = bisect.bisect_right(self.starts, start + most) - 1
        j = max(j, i + 1)
        return memoryview(self.data)[start : self.starts[j]]

    def offset_for_time(self, ms):
        """(offset, timestamp) as ListOffsets answers a time: the first batch whose records
        reach it (its max timestamp stands for the record's); (-1, -1) when none does."""
        for i, ts in enumerate(self.max_ts):
            if ts >= ms:
                offset = max(self.log_start, self.last_offsets[i - 1] + 1 if i else self.log_start)
                return offset, ts
        return -1, -1


class LogBroker:
    """A broker on 127.0.0.1 serving `logs` ({(topic, partition): PartitionLog}).

    `fault(api_key, version, request)` (optional) may return an answer message, CLOSE, or
    None for the normal answer: the place for injected errors. `requests` counts answers
    per API key."""

    def __init__(self, logs, node_id=1, fault=None):
        self.logs, self.node_id, self.fault = logs, node_id, fault
        self.nodes = {}  # node_id -> port, every broker of the cluster (cluster() sets it)
        self.leaders = {}  # (topic, partition) -> node_id; default: this broker
        self.epochs = {}  # (topic, partition) -> leader epoch
        self.requests = {}
        self._stop = threading.Event()
        self._socks = set()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.nodes[node_id] = self.port
        threading.Thread(target=self._accept, daemon=True).start()

    def stop_listening(self):
        """Refuse new connections from now on (a broker that went away)."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self.listener.close()

    def close(self):
        self._stop.set()
        self.stop_listening()
        for s in list(self._socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self._socks.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _recv(self, conn, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = conn.recv_into(view[got:])
            if not k:
                return None
            got += k
        return buf

    def _serve(self, conn):
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # closed by close() before this thread began
            return
        try:
            while True:
                head = self._recv(conn, 4)
                if head is None:
                    return
                body = self._recv(conn, struct.unpack(">i", head)[0])
                if body is None:
                    return
                header, request = decode_request(bytes(head + body), trailing="keep")[:2]
                key, version = header.request_api_key, header.request_api_version
                self.requests[key] = self.requests.get(key, 0) + 1
                answer = self.fault(key, version, request) if self.fault else None
                if answer is CLOSE:
                    return
                if answer is None:
                    if key == ProduceRequest.API_KEY and request.acks == 0:
                        continue  # acks=0: the producer waits for no answer
                    answer = self._answer(key, version, request)
                conn.sendall(encode_response(answer, version, header.correlation_id))
        except OSError:
            return
        finally:
            self._socks.discard(conn)
            conn.close()

    def leader(self, key):
        return self.leaders.get(key, self.node_id)

    def _answer(self, key, version, request):  # noqa: C901 - one branch per API
        if key == ApiVersionsRequest.API_KEY:
            return ApiVersionsResponse(
                api_keys=[
                    ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(SUPPORTED.items())
                ]
            )
        if key == MetadataRequest.API_KEY:
            return self._metadata(request)
        if key == ListOffsetsRequest.API_KEY:
            return self._list_offsets(request)
        if key == FetchRequest.API_KEY:
            return self._fetch(request)
        if key == ProduceRequest.API_KEY:
            return self._refuse_produce(request)
        print(f"log_broker: no answer for API key {key} v{version}", file=sys.stderr, flush=True)
        raise AssertionError(f"no answer for API {key}")

    def _metadata(self, request):
        topics = sorted({t for t, _ in self.logs})
        asked = topics if request.topics is None else [t.name for t in request.topics]
        out = []
        for name in asked:
            parts = sorted(p for t, p in self.logs if t == name)
            out.append(
                MetadataResponse.MetadataResponseTopic(
                    error_code=0 if parts else UNKNOWN_TOPIC_OR_PARTITION,
                    name=name,
                    partitions=[
                        MetadataResponse.MetadataResponsePartition(
                            partition_index=p,
                            leader_id=self.leader((name, p)),
                            leader_epoch=self.epochs.get((name, p), 0),
                            replica_nodes=[self.leader((name, p))],
                            isr_nodes=[self.leader((name, p))],
                        )
                        for p in parts
                    ],
                )
            )
        return MetadataResponse(
            brokers=[
                MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=port)
                for n, port in sorted(self.nodes.items())
            ],
            controller_id=self.node_id,
            topics=out,
        )

    def _list_offsets(self, request):
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                log = self.logs.get((t.name, p.partition_index))
                error, offset, stamp = 0, -1, -1
                if log is None:
                    error = UNKNOWN_TOPIC_OR_PARTITION
                elif self.leader((t.name, p.partition_index)) != self.node_id:
                    error = NOT_LEADER_OR_FOLLOWER
                elif p.timestamp == -2:
                    offset = log.log_start
                elif p.timestamp == -1:
                    offset = log.end
                else:
                    offset, stamp = log.offset_for_time(p.timestamp)
                parts.append(
                    ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=error,
                        offset=offset,
                        timestamp=stamp,
                    )
                )
            topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts)
            )
        return ListOffsetsResponse(topics=topics)

    def _refuse_produce(self, request):
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        ProduceResponse.PartitionProduceResponse(
                            index=p.index, error_code=INVALID_REQUEST, error_message="read-only"
                        )
                        for p in t.partition_data
                    ],
                )
                for t in request.topic_data
            ]
        )

    def _fetch(self, request):
        left = request.max_bytes
        responses = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                key = (t.topic, p.partition)
                log = self.logs.get(key)
                error, records, aborted = 0, b"", []
                hw = log.end if log else -1
                if log is None:
                    error = UNKNOWN_TOPIC_OR_PARTITION
                elif self.leader(key) != self.node_id:
                    error = NOT_LEADER_OR_FOLLOWER
                elif not log.log_start <= p.fetch_offset <= log.end:
                    error = OFFSET_OUT_OF_RANGE
                else:
                    records = log.read(p.fetch_offset, min(p.partition_max_bytes, max(left, 1)))
                    left -= len(records)
                    aborted = [
                        FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                        for pid, first in log.aborted
                    ]
                parts.append(
                    FetchResponse.PartitionData(
                        partition_index=p.partition,
                        error_code=error,
                        high_watermark=hw,
                        last_stable_offset=hw,
                        log_start_offset=log.log_start if log else -1,
                        aborted_transactions=aborted,
                        records=records,
                    )
                )
            responses.append(FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=parts))
        return FetchResponse(responses=responses)


def cluster(brokers):
    """Make LogBrokers one cluster: each lists them all in Metadata."""
    nodes = {b.node_id: b.port for b in brokers}
    for b in brokers:
        b.nodes = nodes
    return brokers


def synthetic_logs(topic, partitions, records, value_size, per_batch=1000, compression="none"):
    """{(topic, p): PartitionLog} of `records` records over `partitions`, keyed, with
    `value_size`-byte values, written as fastkwire's record batches of `per_batch`."""
    import numpy as np

    from fastkwire import records as rec
    from fastkwire.records import BinaryColumn, HeaderColumns, RecordColumns

    logs = {}
    each = records // partitions
    for p in range(partitions):
        batches = []
        for base in range(0, each, per_batch):
            n = min(per_batch, each - base)
            keys = b"".join(b"key-%08d" % (base + i) for i in range(n))
            cols = RecordColumns(
                np.arange(base, base + n, dtype=np.int64),
                np.full(n, 1_700_000_000_000, dtype=np.int64) + np.arange(base, base + n),
                BinaryColumn(
                    np.frombuffer(keys, dtype=np.uint8),
                    np.arange(0, 12 * (n + 1), 12, dtype=np.int32),
                    np.zeros(n, dtype=bool),
                ),
                BinaryColumn(
                    np.full(n * value_size, ord("v"), dtype=np.uint8),
                    np.arange(0, value_size * (n + 1), value_size, dtype=np.int32),
                    np.zeros(n, dtype=bool),
                ),
                HeaderColumns(
                    np.zeros(n + 1, dtype=np.int32),
                    BinaryColumn(np.zeros(0, np.uint8), np.zeros(1, np.int32), np.zeros(0, bool)),
                    BinaryColumn(np.zeros(0, np.uint8), np.zeros(1, np.int32), np.zeros(0, bool)),
                ),
            )
            batches.append(rec.write_batch(cols, base_offset=base, compression=compression))
        logs[(topic, p)] = PartitionLog(batches)
    return logs


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topic", default="bench")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--per-batch", type=int, default=1000)
    args = ap.parse_args(argv)
    logs = synthetic_logs(
        args.topic, args.partitions, args.records, args.value_size, args.per_batch
    )
    broker = LogBroker(logs)
    print(broker.port, flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin
    finally:
        broker.close()


if __name__ == "__main__":
    main()
