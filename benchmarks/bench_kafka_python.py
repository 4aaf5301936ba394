"""kafka-python 3 stock against kafka-python 3 with fastkwire.kafka_python installed, in
one process:

- kp_fetch_take: `Fetcher.PartitionRecords(0, tp, MemoryRecords(batch)).take()` over one
  uncompressed batch of 10,000 records (12-byte keys, 100-byte values, one header each),
  CRC checked (kafka-python's default), no deserializers: the consumer's path from the
  fetched bytes to the ConsumerRecords.
- kp_build: `MemoryRecordsBuilder` (magic 2, no compression) with the same 10,000
  appends, then close() and buffer().
- kp_metadata: `MetadataResponse.decode(body, version=12)` of 1,000 topics x 10
  partitions (3 replicas each), kafka-python's own classes out.
- kp_fetch_exchange: a Fetch v12 request through `KafkaProtocol.send_request` /
  `send_bytes`, and its 1.6 MB response (16 partitions of 100 KB records) through
  `receive_bytes`, in 64 KiB chunks as a socket hands them over.

    pytest benchmarks/bench_kafka_python.py --benchmark-only --benchmark-group-by=group

Contestants are "kafka-python" (stock) and "cython" (the same calls, installed), so
compare.py's ratio and target tables carry them.
"""

import gc
import random

import pytest

pytest.importorskip("kafka")
import fastkwire.kafka_python as fkp  # noqa: E402

N = 10_000


def _items():
    rng = random.Random(20)
    return [
        (1_700_000_000_000 + i, rng.randbytes(12), rng.randbytes(100), [("h", b"0")])
        for i in range(N)
    ]


ITEMS = _items()


def _build():
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, 0, 1 << 30)
    for ts, key, value, headers in ITEMS:
        builder.append(ts, key, value, headers)
    builder.close()
    return builder.buffer()


def _take(data):
    from kafka.consumer.fetcher import Fetcher
    from kafka.record.memory_records import MemoryRecords
    from kafka.structs import TopicPartition

    tp = TopicPartition("bench", 0)

    def run():
        records = Fetcher.PartitionRecords(0, tp, MemoryRecords(data)).take()
        assert len(records) == N
        return records

    return run


def _metadata_body():
    import uuid

    from fastkwire import MetadataResponse as M

    rng = random.Random(7)
    msg = M(
        brokers=[
            M.MetadataResponseBroker(node_id=i, host=f"broker-{i}", port=9092) for i in range(3)
        ],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            M.MetadataResponseTopic(
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                partitions=[
                    M.MetadataResponsePartition(
                        partition_index=p,
                        leader_id=p % 3,
                        leader_epoch=5,
                        replica_nodes=[0, 1, 2],
                        isr_nodes=[0, 1, 2],
                    )
                    for p in range(10)
                ],
            )
            for t in range(1000)
        ],
    )
    return msg.encode(12)


def _metadata(body):
    from kafka.protocol.metadata import MetadataResponse

    def run():
        return MetadataResponse.decode(body, version=12)

    return run


def _fetch_response_frame(correlation_id):
    import fastkwire
    from fastkwire import FetchResponse as F

    rng = random.Random(9)
    msg = F(
        session_id=1,
        responses=[
            F.FetchableTopicResponse(
                topic="bench",
                partitions=[
                    F.PartitionData(
                        partition_index=p, high_watermark=10**6, records=rng.randbytes(100_000)
                    )
                    for p in range(16)
                ],
            )
        ],
    )
    return fastkwire.encode_response(msg, 12, correlation_id)


def _fetch_exchange():
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.parser import KafkaProtocol

    frame = _fetch_response_frame(1)
    chunks = [frame[i : i + 65536] for i in range(0, len(frame), 65536)]
    Topic = FetchRequest.FetchTopic
    Partition = Topic.FetchPartition

    def run():
        parser = KafkaProtocol(client_id="bench")
        request = FetchRequest[12](
            replica_id=-1,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=2**26,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                Topic(
                    topic="bench",
                    partitions=[
                        Partition(
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=2**20,
                        )
                        for p in range(16)
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        parser.send_request(request)
        assert parser.send_bytes()
        responses = []
        for chunk in chunks:
            responses += parser.receive_bytes(chunk)
        assert len(responses) == 1 and len(responses[0][1].responses[0].partitions) == 16
        return responses

    return run


def _bench(benchmark, workload, op, contestant, make):
    if contestant == "cython":
        try:
            fkp.install()
        except fkp.UnsupportedKafkaPython as exc:  # an untested kafka-python, or no compiled core
            pytest.skip(str(exc))
    try:
        fn = make()
        reference = fn()
        gc.collect()
        gc.freeze()  # the prepared batch and records stay out of the collector's way
        benchmark.group = f"{workload} {op}"
        benchmark.extra_info.update(workload=workload, op=op, contestant=contestant)
        result = benchmark(fn)
        assert type(result) is type(reference)
    finally:
        fkp.uninstall()
        gc.unfreeze()


@pytest.mark.parametrize("contestant", ["kafka-python", "cython"])
def test_kp_fetch_take(benchmark, contestant):
    data = bytes(_build())
    _bench(benchmark, "kp_fetch_take", "decode", contestant, lambda: _take(data))


@pytest.mark.parametrize("contestant", ["kafka-python", "cython"])
def test_kp_build(benchmark, contestant):
    _bench(benchmark, "kp_build", "encode", contestant, lambda: _build)


@pytest.mark.parametrize("contestant", ["kafka-python", "cython"])
def test_kp_metadata(benchmark, contestant):
    body = _metadata_body()
    _bench(benchmark, "kp_metadata", "decode", contestant, lambda: _metadata(body))


@pytest.mark.parametrize("contestant", ["kafka-python", "cython"])
def test_kp_fetch_exchange(benchmark, contestant):
    _bench(benchmark, "kp_fetch_exchange", "decode", contestant, _fetch_exchange)
