"""The seams: where in aiokafka each replacement goes.

A class is patched at its own attributes, so every module that bound the class sees the
change. A function is patched at the module whose global its callers look up
(DefaultPartitioner calls `murmur2` from its own module's globals).
"""

import importlib
from typing import NamedTuple

from .._accelerator import Patch

# Tested against these releases (their partitioner and fetcher code).
SUPPORTED = ("0.14.0",)
# Looked at and declined, with why.
DECLINED = {
    "0.15.0rc1": (
        "a release candidate whose own test suite has not been run with the accelerator "
        "(its sdist ships no tests), and it changed Struct.decode, one of the seams (it now "
        "decodes through the class's Schema)"
    ),
}

# (module, owner in it ("" for the module itself), attribute, name in _aiokafka)
SEAMS = (
    ("aiokafka.partitioner", "", "murmur2", "murmur2"),
    ("aiokafka.producer.producer", "AIOKafkaProducer", "_partition", "producer_partition"),
    ("aiokafka.consumer.fetcher", "PartitionRecords", "_unpack_records", "unpack_records"),
    ("aiokafka.consumer.fetcher", "PartitionRecords", "__next__", "partition_records_next"),
    ("aiokafka.consumer.fetcher", "FetchResult", "getall", "fetch_result_getall"),
    (
        "aiokafka.consumer.subscription_state",
        "SubscriptionState",
        "fetch_context",
        "fetch_context",
    ),
    ("aiokafka.protocol.struct", "Struct", "decode", "struct_decode"),
)

_classmethods = {}  # replacement function -> the one classmethod wrapping it


class Table(NamedTuple):
    patches: tuple
    bindings: dict  # aiokafka's objects the compiled helper needs (its bind())
    protocol: dict  # and those its Struct.decode needs (bind_protocol())


def _owner(module, path):
    obj = importlib.import_module(module)
    for name in filter(None, path.split(".")):
        obj = getattr(obj, name)
    return obj


def _stock(value, module, where):
    """value when aiokafka's own code defined it (not a mock left in place)."""
    if getattr(value, "__module__", None) != module:
        raise LookupError(f"{where} is not aiokafka's own ({value!r})")
    return value


def _own(module, name, *members):
    """module's class name, whose members are aiokafka's own (a classmethod's function)."""
    cls = getattr(module, name, None)
    for member in members:
        value = vars(cls).get(member) if isinstance(cls, type) else None
        _stock(getattr(value, "__func__", value), module.__name__, f"{name}.{member}")
    return cls


def _c_class(module, name):
    """aiokafka's compiled record class module.name, or None (AIOKAFKA_NO_EXTENSIONS, no
    build)."""
    try:
        compiled = importlib.import_module(f"aiokafka.record._crecords.{module}")
    except ImportError:
        return None
    return getattr(compiled, name, None)


def build_patches():
    """Every seam found, or LookupError naming the first one that is not there."""
    from fastkwire import _aiokafka

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
        original = _stock(vars(owner)[attribute], module, where)
        function = getattr(_aiokafka, replacement)
        if isinstance(original, classmethod):  # a classmethod is replaced by one (made once)
            function = _classmethods.setdefault(function, classmethod(function))
        patches.append(Patch(owner, attribute, original, function))

    from aiokafka import cluster, partitioner
    from aiokafka.consumer import fetcher, subscription_state
    from aiokafka.producer import producer

    first = {(p.owner, p.attribute): p.original for p in patches}
    records = fetcher.PartitionRecords
    bindings = dict(
        stock_murmur2=first[(partitioner, "murmur2")],
        stock_unpack_records=first[(records, "_unpack_records")],
        stock_consumer_record=_stock(
            vars(records).get("_consumer_record"),
            fetcher.__name__,
            "PartitionRecords._consumer_record",
        ),
        PartitionRecords=records,
        ConsumerRecord=fetcher.ConsumerRecord,
        fetcher_module=fetcher,
        READ_COMMITTED=fetcher.READ_COMMITTED,
        CRecord=_c_class("default_records", "DefaultRecord"),
        CMemoryRecords=_c_class("memory_records", "MemoryRecords"),
        CRecordBatch=_c_class("default_records", "DefaultRecordBatch"),
        stock_fetch_context=first[(subscription_state.SubscriptionState, "fetch_context")],
        subscription_module=subscription_state,
        stock_partition=first[(producer.AIOKafkaProducer, "_partition")],
        DefaultPartitioner=_own(partitioner, "DefaultPartitioner", "__call__"),
        partitioner_module=partitioner,
        ClusterMetadata=_own(
            cluster, "ClusterMetadata", "partitions_for_topic", "available_partitions_for_topic"
        ),
    )
    import io

    from aiokafka.protocol import struct, types

    protocol = dict(
        stock_struct_decode=first[(struct.Struct, "decode")].__func__,
        types_module=types,
        BytesIO=io.BytesIO,
    )
    return Table(tuple(patches), bindings, protocol)
