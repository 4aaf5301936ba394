"""Hostile request frames through the broker's request path (fastkwire.broker), no socket.

    python3 fuzz/hostile_requests.py --loop 20000 --seed 1

The seeds are valid requests of every API and version the broker serves (their defaults,
plus Produce with real record batches, Fetch and Metadata of a topic that exists); each
input is a seed mutated by fuzz/differential.py's mutations. Every frame goes through
`answer_frame` against one broker whose state carries over from input to input. The
contract, checked for each:
- the frame gets exactly one outcome, at once or (a Fetch that waits) once the clock has
  passed its wait: an answer, nothing, or the end of the connection (`Close`);
- an answer is a whole frame carrying the request's correlation id that decodes as that
  API's response at the request's version (v0 for an ApiVersions version not served);
- nothing is only ever the answer to a Produce with acks=0;
- no handler fails (an error logged by the broker is a finding);
- the logs stay logs: every partition's batches read back whole with their CRCs, base
  offsets rising from the log start to the log end, the last stable offset between them;
- the cluster holds at most its max_partitions.
Anything else is printed with its input (hex) and counted; the exit status is 1 if any.
"""

import argparse
import logging
import random
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential as D  # noqa: E402

import fastkwire  # noqa: E402
from fastkwire import records  # noqa: E402
from fastkwire.broker import Apis, Cluster  # noqa: E402
from fastkwire.broker._exchange import Close, answer_frame  # noqa: E402
from fastkwire.proxy._frames import produce_acks, request_header  # noqa: E402

TOPIC = "fuzz"
MAX_PARTITIONS = 2_000


class Finding(Exception):
    pass


class _Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


def make_broker():
    clock = [0.0]
    cluster = Cluster({0: ("127.0.0.1", 9092)}, num_partitions=2, max_partitions=MAX_PARTITIONS)
    apis = Apis(cluster, clock=lambda: clock[0])
    cluster.create_topic(TOPIC, 2)
    return apis, clock


def seeds(apis):
    """Valid request frames: every served API and version with its defaults, and a few
    that reach the log."""
    out = []
    for key, (low, high) in sorted(apis.versions().items()):
        cls = fastkwire.REQUEST_CLASSES[key]
        for version in range(low, high + 1):
            try:
                out.append(fastkwire.encode_request(cls(), version, 7, "fuzz"))
            except (ValueError, TypeError):
                pass  # a version whose required fields have no default
    batch = records.write_batch(
        [records.Record(timestamp=1000 + i, key=b"k", value=b"v" * i) for i in range(3)],
        compression="gzip",
    )
    idempotent = records.write_batch(
        [records.Record(timestamp=5, key=None, value=b"x")],
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
    )
    P = fastkwire.ProduceRequest
    for data, acks in ((batch, -1), (idempotent, 1), (batch, 0)):
        request = P(
            acks=acks,
            timeout_ms=100,
            topic_data=[
                P.TopicProduceData(
                    name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=data)]
                )
            ],
        )
        out += [fastkwire.encode_request(request, v, 8, "fuzz") for v in (3, 9, 12)]
    F = fastkwire.FetchRequest
    fetch = F(
        max_wait_ms=50,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=TOPIC,
                topic_id=apis.cluster.topics[TOPIC].id,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=512)],
            )
        ],
    )
    out += [fastkwire.encode_request(fetch, v, 9, "fuzz") for v in (4, 11, 13, 17)]
    L = fastkwire.ListOffsetsRequest
    listing = L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=TOPIC,
                partitions=[
                    L.ListOffsetsPartition(partition_index=0, timestamp=ts)
                    for ts in (-1, -2, -3, 0, 1001)
                ],
            )
        ],
    )
    out += [fastkwire.encode_request(listing, v, 11, "fuzz") for v in (1, 4, 10)]
    R = fastkwire.DeleteRecordsRequest
    deleting = R(
        topics=[
            R.DeleteRecordsTopic(
                name=TOPIC, partitions=[R.DeleteRecordsPartition(partition_index=1, offset=1)]
            )
        ]
    )
    out += [fastkwire.encode_request(deleting, v, 12, "fuzz") for v in (0, 2)]
    C = fastkwire.CreateTopicsRequest
    creating = C(
        topics=[C.CreatableTopic(name="new", num_partitions=3, replication_factor=1)],
        timeout_ms=100,
    )
    out += [fastkwire.encode_request(creating, v, 13, "fuzz") for v in (2, 5, 7)]
    G = fastkwire.CreatePartitionsRequest
    growing = G(topics=[G.CreatePartitionsTopic(name=TOPIC, count=3)], timeout_ms=100)
    out += [fastkwire.encode_request(growing, v, 14, "fuzz") for v in (0, 3)]
    # a transaction: its producer id is the first the broker hands out (make_broker's fresh)
    init = fastkwire.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000)
    out += [fastkwire.encode_request(init, v, 15, "fuzz") for v in (0, 4)]
    A = fastkwire.AddPartitionsToTxnRequest
    adding = A(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1000,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0, 1])],
    )
    out += [fastkwire.encode_request(adding, v, 16, "fuzz") for v in (0, 3)]
    transactional = records.write_batch(
        [records.Record(timestamp=9, value=b"t")],
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    request = P(
        transactional_id="tx",
        acks=-1,
        timeout_ms=100,
        topic_data=[
            P.TopicProduceData(
                name=TOPIC, partition_data=[P.PartitionProduceData(index=1, records=transactional)]
            )
        ],
    )
    out.append(fastkwire.encode_request(request, 9, 17, "fuzz"))
    for committed in (True, False):
        ending = fastkwire.EndTxnRequest(
            transactional_id="tx", producer_id=1000, producer_epoch=0, committed=committed
        )
        out += [fastkwire.encode_request(ending, v, 18, "fuzz") for v in (0, 4)]
    M = fastkwire.MetadataRequest
    meta = M(topics=[M.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=True)
    out += [fastkwire.encode_request(meta, v, 10, "fuzz") for v in (1, 9, 12)]
    return out


def check_one(apis, clock, errors, frame):
    outcomes = []
    answer_frame(apis, frame, 0, "fuzz", outcomes.append)
    clock[0] += 2**31 / 1000  # past the longest wait an int32 of milliseconds asks
    apis.tick()
    if errors.records:
        raise Finding("the broker logged an error: " + errors.records[-1])
    if len(outcomes) != 1:
        raise Finding(f"{len(outcomes)} outcomes for one frame: {outcomes!r}")
    (outcome,) = outcomes
    if isinstance(outcome, Close):
        return "closed"
    header = request_header(frame)
    if outcome is None:
        if header is None or produce_acks(frame, header) != 0:
            raise Finding("no answer to a request that is not an acks=0 Produce")
        return "silent"
    if isinstance(outcome, tuple):  # a Fetch answer in pieces: they must make one frame
        outcome = b"".join(outcome)
    if not isinstance(outcome, bytes):
        raise Finding(f"an outcome of type {type(outcome).__name__}")
    (size,) = struct.unpack_from(">i", outcome)
    if size != len(outcome) - 4:
        raise Finding("an answer whose size prefix is wrong")
    version = header.api_version
    served = apis.versions().get(header.api_key)
    if header.api_key == fastkwire.ApiVersionsRequest.API_KEY and not (
        served[0] <= version <= served[1]
    ):
        version = 0  # an ApiVersions not served gets the v0 answer
    response_header, _ = fastkwire.decode_response(outcome, header.api_key, version)
    if response_header.correlation_id != header.correlation_id:
        raise Finding("an answer with another correlation id")
    return "answered"


def check_state(apis):
    cluster = apis.cluster
    if cluster.partitions > cluster.max_partitions:
        raise Finding(f"{cluster.partitions} partitions past max_partitions")
    for topic in cluster.topics.values():
        for p in topic.partitions:
            log = p.log
            if not log.log_start <= log.log_end:
                raise Finding(f"{topic.name}-{p.index}: log start past the log end")
            if log.log_start == log.log_end:
                continue
            if not log.log_start <= log.last_stable_offset <= log.log_end:
                raise Finding(f"{topic.name}-{p.index}: the last stable offset is outside the log")
            batches = records.read_batches(log.read(log.log_start, 1 << 40))
            bases = [b.base_offset for b in batches]
            if bases != sorted(set(bases)) or batches.tail:
                raise Finding(f"{topic.name}-{p.index}: batches out of order or cut")
            last = batches[-1]
            if last.base_offset + last.last_offset_delta + 1 != log.log_end:
                raise Finding(f"{topic.name}-{p.index}: the last batch does not end the log")


def run(loops, seed, stop_after=None):
    rng = random.Random(seed)
    errors = _Errors()
    logging.getLogger("fastkwire.broker").addHandler(errors)
    apis, clock = make_broker()
    pool = seeds(apis)
    counts = {"answered": 0, "closed": 0, "silent": 0}
    findings = 0
    started = time.monotonic()
    for i in range(loops):
        frame = D.mutate(rng.choice(pool), rng, pool) if rng.random() < 0.9 else rng.choice(pool)
        try:
            counts[check_one(apis, clock, errors, frame)] += 1
            if i % 50 == 0:
                check_state(apis)
        except Finding as e:
            findings += 1
            errors.records.clear()
            print(f"finding at input {i}: {e}\n  input: {frame.hex()}", file=sys.stderr)
            if stop_after is not None and findings >= stop_after:
                break
    check_state(apis)
    logging.getLogger("fastkwire.broker").removeHandler(errors)
    took = time.monotonic() - started
    return counts, findings, took


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", type=int, default=20000, help="inputs to try")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    logging.getLogger("fastkwire.broker").setLevel(logging.INFO)
    logging.getLogger("fastkwire.broker").propagate = False
    counts, findings, took = run(args.loop, args.seed)
    print(
        f"{args.loop} inputs in {took:.1f} s: {counts['answered']} answered, "
        f"{counts['closed']} connections closed, {counts['silent']} acks=0 produces; "
        f"{findings} finding(s)"
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
