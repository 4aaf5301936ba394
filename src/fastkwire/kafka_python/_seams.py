"""The seams: where in kafka-python each replacement goes.

A class is patched at its own attributes, so every module that bound the class at import
(`from kafka.record import MemoryRecords` in the fetcher, the producer's imports, a
user's) sees the change. A function is patched at every module that bound its name.
"""

import importlib
import inspect
from typing import NamedTuple

from .._accelerator import Patch

# Tested against these releases (their record, fetcher and partitioner code is the same).
SUPPORTED = ("3.0.11", "3.0.12")

# (module, owner in it ("" for the module itself), attribute, replacement: a name in
# _kafka_python, or "protocol."/"parser." and a name in _protocol/_parser)
SEAMS = (
    ("kafka.protocol.parser", "KafkaProtocol", "receive_bytes", "parser.receive_bytes"),
    (
        "kafka.protocol.schemas.fields.struct",
        "StructField",
        "compiled_decode_from",
        "protocol.compiled_decode_from",
    ),
    (
        "kafka.protocol.schemas.fields.struct",
        "StructField",
        "compiled_encode_into",
        "protocol.compiled_encode_into",
    ),
    ("kafka.record.default_records", "DefaultRecordBatch", "__next__", "batch_next"),
    ("kafka.record.default_records", "DefaultRecordBatch", "next", "batch_next"),
    ("kafka.record.default_records", "DefaultRecordBatch", "validate_crc", "batch_validate_crc"),
    ("kafka.consumer.fetcher", "Fetcher.PartitionRecords", "_unpack_records", "unpack_records"),
    ("kafka.record.default_records", "DefaultRecordBatchBuilder", "append", "builder_append"),
    (
        "kafka.record.default_records",
        "DefaultRecordBatchBuilder",
        "write_header",
        "builder_write_header",
    ),
    ("kafka.record.memory_records", "MemoryRecordsBuilder", "append", "memory_builder_append"),
    ("kafka.record.memory_records", "MemoryRecords", "next_batch", "memory_next_batch"),
    ("kafka.producer.producer_batch", "ProducerBatch", "try_append", "batch_try_append"),
    ("kafka.producer.record_accumulator", "RecordAccumulator", "append", "accumulator_append"),
    ("kafka.producer.kafka", "KafkaProducer", "send", "producer_send"),
    ("kafka.record.default_records", "DefaultRecordBatchBuilder", "size_of", "size_of"),
    (
        "kafka.record.default_records",
        "DefaultRecordBatchBuilder",
        "estimate_size_in_bytes",
        "estimate_size_in_bytes",
    ),
    ("kafka.partitioner.default", "DefaultPartitioner", "partition", "default_partition"),
    ("kafka.partitioner.default", "", "murmur2", "murmur2"),
    ("kafka.partitioner", "", "murmur2", "murmur2"),
)


_classmethods = {}  # replacement function -> the one classmethod wrapping it


class Table(NamedTuple):
    patches: tuple
    bindings: dict  # kafka-python's objects the compiled helper needs (its bind())
    builder: dict  # and those its builder needs (bind_builder())
    protocol: dict  # kafka-python's own compiled-codec makers (_protocol.bind())
    parser: dict  # and what the receive path names (_parser.bind())
    sizes: dict  # stock's size estimates (bind_sizes())
    partitioner: dict  # the cluster class and stock's partition (bind_partitioner())


def _owner(module, path):
    obj = importlib.import_module(module)
    for name in filter(None, path.split(".")):
        obj = getattr(obj, name)
    return obj


def build_patches():
    """Every seam found, or LookupError naming the first one that is not there."""
    from fastkwire import _kafka_python, _records

    from . import _parser, _protocol

    sources = {"protocol": _protocol, "parser": _parser}

    patches = []
    for module, path, attribute, replacement in SEAMS:
        where = f"{module}:{path + '.' if path else ''}{attribute}"
        try:
            owner = _owner(module, path)
        except (ImportError, AttributeError):
            raise LookupError(f"seam {where} not found") from None
        # Its own attribute, not an inherited one: setattr and restore must be exact.
        if attribute not in vars(owner):
            raise LookupError(f"seam {where} not found")
        source = _kafka_python
        if "." in replacement:
            prefix, replacement = replacement.split(".")
            source = sources[prefix]
        original = vars(owner)[attribute]
        function = getattr(source, replacement)
        if isinstance(original, classmethod):  # a classmethod is replaced by one (made once)
            function = _classmethods.setdefault(function, classmethod(function))
        patches.append(Patch(owner, attribute, original, function))

    from kafka import errors
    from kafka.consumer import fetcher
    from kafka.partitioner import default
    from kafka.record import default_records as dr
    from kafka.record import memory_records as mr

    first = {(p.owner, p.attribute): p.original for p in patches}
    if first[(dr.DefaultRecordBatch, "__next__")] is not first[(dr.DefaultRecordBatch, "next")]:
        raise LookupError("DefaultRecordBatch.next is not its __next__")
    bindings = dict(
        DefaultRecordBatch=dr.DefaultRecordBatch,
        DefaultRecord=dr.DefaultRecord,
        ControlRecord=dr.ControlRecord,
        CorruptRecordError=errors.CorruptRecordError,
        stock_batch_next=first[(dr.DefaultRecordBatch, "__next__")],
        stock_murmur2=first[(default, "murmur2")],
        crc32c=_records.crc32c,
        PartitionRecords=fetcher.Fetcher.PartitionRecords,
        fetcher_module=fetcher,
        MemoryRecords=mr.MemoryRecords,
        memory_records_module=mr,
        stock_next_batch=first[(mr.MemoryRecords, "next_batch")],
        patches=tuple(patches),
    )
    # The compiled walk reads batches at these offsets, as stock's code does.
    if first[(mr.MemoryRecords, "next_batch")].__defaults__ != (26, 16):
        raise LookupError(
            "MemoryRecords.next_batch's defaults are not (MIN_SLICE 26, MAGIC_OFFSET 16)"
        )
    if getattr(dr.DefaultRecordBatch, "HEADER_STRUCT", None) is None or (
        dr.DefaultRecordBatch.HEADER_STRUCT.format != ">qiibIhiqqqhii"
    ):
        raise LookupError("DefaultRecordBatch.HEADER_STRUCT is not the v2 header")
    stock_append = first[(dr.DefaultRecordBatchBuilder, "append")]
    try:
        stock_time = inspect.signature(stock_append).parameters["time_time"].default
    except (KeyError, ValueError, TypeError):
        raise LookupError("DefaultRecordBatchBuilder.append has no time_time default") from None
    from kafka import future
    from kafka.producer import future as producer_future
    from kafka.producer import kafka as producer, producer_batch, record_accumulator

    builder = dict(
        future_module=future,
        FutureRecordMetadata=producer_future.FutureRecordMetadata,
        producer_module=producer,
        producer_batch_module=producer_batch,
        accumulator_module=record_accumulator,
        stock_try_append=first[(producer_batch.ProducerBatch, "try_append")],
        DefaultRecordBatchBuilder=dr.DefaultRecordBatchBuilder,
        DefaultRecordMetadata=dr.DefaultRecordMetadata,
        stock_builder_append=stock_append,
        stock_time=stock_time,
    )
    sizes = dict(
        stock_size_of_fn=first[(dr.DefaultRecordBatchBuilder, "size_of")].__func__,
        stock_estimate_fn=first[(dr.DefaultRecordBatchBuilder, "estimate_size_in_bytes")].__func__,
    )
    from kafka.protocol.schemas.fields.struct import StructField

    protocol = dict(
        decode=first[(StructField, "compiled_decode_from")],
        encode=first[(StructField, "compiled_encode_into")],
    )
    from kafka.protocol import parser
    from kafka.protocol.frame import KafkaBytes
    from kafka.protocol.metadata import FindCoordinatorResponse
    from kafka.protocol.schemas.fields.codecs import Int32
    from kafka.protocol.api_message import ApiMessage

    parser_names = dict(
        log=parser.log,
        errors=errors,
        kafka_bytes=KafkaBytes,
        int32=Int32,
        find_coordinator_response=FindCoordinatorResponse,
        api_message=ApiMessage,
        stock_process=parser.KafkaProtocol.__dict__["_process_response"],
    )
    from kafka import cluster

    partitioner = dict(
        patches=tuple(patches),
        ClusterMetadata_cls=cluster.ClusterMetadata,
        partitioner_module=default,
        stock_partition_fn=first[(default.DefaultPartitioner, "partition")],
    )
    return Table(tuple(patches), bindings, builder, protocol, parser_names, sizes, partitioner)
