"""A lying broker's answers through the proxy's address rewriting: the fail-closed contract.

`check(seed)` takes, from one seed, an answer that names brokers (every API and version the
proxy rewrites: Metadata, FindCoordinator, DescribeCluster, the KIP-951 node endpoints, the
KRaft quorum's answers), naming real-looking addresses (IP literals, names, the proxy's own
under other spellings, empty hosts, negative and huge ports, thousands of brokers), then
mutates its bytes at random (flips, cuts, insertions, lying lengths and counts, trailing
bytes) and rewrites it the way a proxy with a listener per broker does. The contract, as
invariants:

- The walking rewriter (`walk_rewrite`, what the proxy uses for answers over 4 MiB; the
  smaller ones go through `decode_rewrite`) returns, or raises ValueError (DecodeError is one): the proxy then
  ends that connection. Any other exception is a finding (it would end the connection as
  an internal error).
- A returned frame decodes at the same version, keeps the correlation id and names no
  address but the proxy's (or Kafka's "none": no host and a port of 0 or less). The frame
  returned unchanged names none either.
- Every address named was offered to the mapping, and only those.
- The walking rewriter (which copies what names no broker) agrees with the reference,
  `decode_rewrite`: the answer decoded whole, its addresses replaced and re-encoded. Both refuse the same frames (a DecodeError, and the reference's error
  too); on the others both name the same addresses, offer the mapping the same ones in
  the same order, and give the same bytes when the frame is as the codec writes it (the
  same message otherwise: the reference re-encodes what it did not change).
- `max_size` is the rewritten answer's own size: given exactly that, both rewriters
  give it; a byte less, both refuse with EncodeError (the walk never refuses early).
- Peak memory (tracemalloc, after a first call warmed the caches) stays under
  MEMORY_FACTOR times the frame plus MEMORY_SLACK bytes, on every seed with --memory
  (every 50th without).

Answers are built with their other fields too (every field set, an unknown tagged field
in every struct of flexible versions) for some seeds, so that copying what lies between
the addresses, and the tagged sizes around them, are exercised.

Run: python fuzz/lying_broker.py --loop 20000 --seed 1 (tests/test_proxy_lying_brokers.py
runs a short one); --memory measures every seed.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import tracemalloc
from pathlib import Path

import fastkwire as fk
from fastkwire.errors import DecodeError, EncodeError
from fastkwire.proxy._rewrite import (
    FIRST_VERSION,
    header_end,
    decode_rewrite,
    walk_rewrite,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from differential import full_dict  # noqa: E402

sys.path.pop(0)

MEMORY_FACTOR = 3
MEMORY_SLACK = 256 * 1024

PROXY_HOST = "proxy.invalid"
HOSTS = [
    "10.0.0.7",
    "kafka-1.example",
    "127.0.0.1",
    "0.0.0.0",
    "::1",
    "2130706433",
    "LOCALHOST",
    "localhost.",
    "",
    "é.example",
    "x" * 300,
]
PORTS = [9092, 0, -1, 65535, 65536, 2**31 - 1, -(2**31)]


class Finding(AssertionError):
    pass


def _address(rng):
    return rng.choice(HOSTS), rng.choice(PORTS)


def _message(rng, cls, version):
    """An answer of `cls` at `version` naming a few (or thousands of) brokers."""
    count = rng.choice([0, 1, 3, 20]) if rng.random() < 0.97 else 3000
    picks = [_address(rng) for _ in range(count)]
    name = cls.__name__
    if name in ("MetadataResponse", "DescribeClusterResponse"):
        entry = (
            cls.MetadataResponseBroker if name == "MetadataResponse" else cls.DescribeClusterBroker
        )
        key = "node_id" if name == "MetadataResponse" else "broker_id"
        return cls(
            brokers=[entry(**{key: i}, host=h, port=p) for i, (h, p) in enumerate(picks)],
            **({"topics": []} if name == "MetadataResponse" else {"cluster_id": "c"}),
        )
    if name == "FindCoordinatorResponse":
        if version < 4:
            h, p = picks[0] if picks else ("", -1)
            return cls(
                node_id=rng.choice([-1, 0, 7]), host=h, port=p, error_code=rng.choice([0, 15])
            )
        return cls(
            coordinators=[
                cls.Coordinator(
                    key=f"g{i}",
                    node_id=rng.choice([-1, i]),
                    host=h,
                    port=p,
                    error_code=rng.choice([0, 15]),
                )
                for i, (h, p) in enumerate(picks)
            ]
        )
    if name == "DescribeQuorumResponse":
        return cls(
            topics=[],
            nodes=[
                cls.Node(node_id=i, listeners=[cls.Listener(name="C", host=h, port=p & 0xFFFF)])
                for i, (h, p) in enumerate(picks)
            ],
        )
    if name == "UpdateRaftVoterResponse":
        h, p = picks[0] if picks else ("", 0)
        return cls(current_leader=cls.CurrentLeader(leader_id=1, host=h, port=p))
    uint16 = name in (
        "VoteResponse",
        "BeginQuorumEpochResponse",
        "EndQuorumEpochResponse",
        "FetchSnapshotResponse",
    )
    return cls(
        node_endpoints=[
            cls.NodeEndpoint(node_id=i, host=h, port=(p & 0xFFFF) if uint16 else p)
            for i, (h, p) in enumerate(picks)
        ]
    )


# The fields of an answer that name brokers (those _message sets).
_ADDRESS_FIELDS = (
    "brokers",
    "coordinators",
    "nodes",
    "node_endpoints",
    "current_leader",
    "node_id",
    "host",
    "port",
    "error_code",
)


def _with_other_fields(msg, cls, version):
    """`msg`'s addresses in an answer whose every other field is set."""
    full = cls.from_dict(full_dict(cls.__name__, version))
    for name in _ADDRESS_FIELDS:
        if hasattr(msg, name):
            setattr(full, name, getattr(msg, name))
    return full


def as_written(frame, api_key, version):
    """Whether a frame that decodes is as the codec writes its message (so re-encoding it
    gives its bytes back)."""
    _, msg, extra = fk.decode_response(frame, api_key, version, records="view", trailing="keep")
    start = header_end(frame, api_key, version)
    return msg.encode(version) == frame[start : len(frame) - len(extra)]


def _mapping(offered, order):
    def mapped(address):
        order.append(address)
        return PROXY_HOST, offered.setdefault(address, 30001 + len(offered))

    return mapped


def _mutate(rng, frame):
    data = bytearray(frame)
    for _ in range(rng.choice([0, 0, 1, 2, 5])):
        kind = rng.random()
        pos = rng.randrange(4, len(data)) if len(data) > 4 else 4
        if kind < 0.3 and len(data) > 4:
            data[pos] ^= 1 << rng.randrange(8)
        elif kind < 0.45:
            del data[pos : pos + rng.randrange(1, 9)]
        elif kind < 0.6:
            data[pos:pos] = rng.randbytes(rng.randrange(1, 9))
        elif kind < 0.8 and len(data) >= pos + 4:
            data[pos : pos + 4] = struct.pack(">i", rng.choice([-1, 0, 1, 2**31 - 1, 1000, 255]))
        elif kind < 0.9 and len(data) > pos:
            data[pos] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
        else:
            data += rng.randbytes(rng.randrange(1, 16))
    data[:4] = struct.pack(">i", len(data) - 4)
    return bytes(data)


def _named_ok(host, port):
    return host == PROXY_HOST or (not host and port <= 0)


def _every_address(value):
    """Every (host, port) anywhere in a decoded answer (its to_dict()): the oracle walks
    the message itself, not the rewriter's list of where addresses are."""
    if isinstance(value, dict):
        if "host" in value and "port" in value:
            yield value["host"], value["port"]
        for v in value.values():
            yield from _every_address(v)
    elif isinstance(value, list):
        for v in value:
            yield from _every_address(v)


def check(seed, memory=None):
    rng = random.Random(seed)
    api_key = rng.choice(sorted(FIRST_VERSION))
    cls = fk.RESPONSE_CLASSES[api_key]
    version = rng.randrange(max(FIRST_VERSION[api_key], cls.MIN_VERSION), cls.MAX_VERSION + 1)
    try:
        msg = _message(rng, cls, version)
        if rng.random() < 0.3:
            msg = _with_other_fields(msg, cls, version)
        frame = fk.encode_response(msg, version, seed & 0x7FFFFFFF)
    except ValueError:
        return "unencodable"  # a port out of the field's range: not an answer a broker sends
    frame = _mutate(rng, frame)
    offered, order = {}, []
    try:
        new, named = walk_rewrite(frame, api_key, version, _mapping(offered, order))
    except DecodeError as e:
        _refused_too(seed, cls, version, frame, e)
        return "refused"
    except Exception as e:  # noqa: BLE001 - the finding
        raise Finding(f"seed {seed}: {cls.__name__} v{version}: {type(e).__name__}: {e}") from e
    where = f"seed {seed}: {cls.__name__} v{version}"
    if new[4:8] != frame[4:8]:
        raise Finding(f"seed {seed}: the correlation id changed")
    try:
        _, got, _ = fk.decode_response(new, api_key, version, records="view", trailing="keep")
    except ValueError as e:
        raise Finding(f"{where}: the rewritten frame does not decode: {e}")
    left = [a for a in _every_address(got.to_dict()) if not _named_ok(*a)]
    if left:
        raise Finding(f"{where}: told {left[:3]}")
    if set(offered) != set(named):
        raise Finding(
            f"{where}: the mapping was offered {list(offered)[:5]}, the answer named {named[:5]}"
        )
    _agrees(where, frame, api_key, version, new, named, order)
    if memory if memory is not None else seed % 50 == 0:
        _memory(where, frame, api_key, version)
    return "rewritten" if new is not frame else "unchanged"


def _refused_too(seed, cls, version, frame, error):
    """The rewriter refused a frame: the reference must refuse it too."""
    try:
        decode_rewrite(frame, cls.API_KEY, version, _mapping({}, []))
    except ValueError:
        return
    raise Finding(f"seed {seed}: {cls.__name__} v{version}: refused ({error}) a frame that decodes")


def _agrees(where, frame, api_key, version, new, named, order):
    ref_order = []
    try:
        ref, ref_named = decode_rewrite(frame, api_key, version, _mapping({}, ref_order))
    except ValueError as e:
        raise Finding(f"{where}: rewrote a frame that does not decode: {e}") from e
    if named != ref_named or order != ref_order:
        raise Finding(
            f"{where}: named {named[:5]} (offered {order[:5]}), the reference "
            f"{ref_named[:5]} (offered {ref_order[:5]})"
        )
    if (new is frame) != (ref is frame):
        raise Finding(f"{where}: only one of the rewriter and the reference changed the frame")
    if as_written(frame, api_key, version):
        if new != ref:
            raise Finding(f"{where}: the bytes differ from the reference's")
        if new is not frame:
            _fits_exactly(where, frame, api_key, version, new)
        return
    mine = fk.decode_response(new, api_key, version, records="view", trailing="keep")
    theirs = fk.decode_response(ref, api_key, version, records="view", trailing="keep")
    if mine[1].to_dict() != theirs[1].to_dict() or mine[2] != theirs[2]:
        raise Finding(f"{where}: the message differs from the reference's")


def _fits_exactly(where, frame, api_key, version, new):
    for rewrite in (walk_rewrite, decode_rewrite):
        name = rewrite.__name__
        if rewrite(frame, api_key, version, _mapping({}, []), len(new) - 4)[0] != new:
            raise Finding(f"{where}: {name} with max_size its own size gave other bytes")
        try:
            rewrite(frame, api_key, version, _mapping({}, []), len(new) - 5)
        except EncodeError:
            continue
        raise Finding(f"{where}: {name} gave an answer a byte over max_size")


def _memory(where, frame, api_key, version):
    walk_rewrite(frame, api_key, version, _mapping({}, []))  # warms the plans' caches
    mapped = _mapping({}, [])
    tracemalloc.start()
    try:
        walk_rewrite(frame, api_key, version, mapped)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if peak > MEMORY_FACTOR * len(frame) + MEMORY_SLACK:
        raise Finding(f"{where}: peak {peak} bytes for a frame of {len(frame)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--memory", action="store_true", help="measure every seed's peak")
    args = parser.parse_args()
    counts = {}
    for seed in range(args.seed, args.seed + args.loop):
        outcome = check(seed, True if args.memory else None)
        counts[outcome] = counts.get(outcome, 0) + 1
    print(f"lying_broker: {args.loop} answers: {counts}")


if __name__ == "__main__":
    sys.exit(main())
