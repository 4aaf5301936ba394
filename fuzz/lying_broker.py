"""A lying broker's answers through the proxy's address rewriting: the fail-closed contract.

`check(seed)` takes, from one seed, an answer that names brokers (every API and version the
proxy rewrites: Metadata, FindCoordinator, DescribeCluster, the KIP-951 node endpoints, the
KRaft quorum's answers), naming real-looking addresses (IP literals, names, the proxy's own
under other spellings, empty hosts, negative and huge ports, thousands of brokers), then
mutates its bytes at random (flips, cuts, insertions, lying lengths and counts, trailing
bytes) and rewrites it the way a proxy with a listener per broker does. The contract, as
invariants:

- `rewrite_addresses` returns, or raises ValueError (DecodeError is one): the proxy then
  ends that connection. Any other exception is a finding (it would end the connection as
  an internal error).
- A returned frame decodes at the same version, keeps the correlation id and names no
  address but the proxy's (or Kafka's "none": no host and a port of 0 or less). The frame
  returned unchanged names none either.
- Every address named was offered to the mapping, and only those.

Run: python fuzz/lying_broker.py --loop 20000 --seed 1 (tests/test_proxy_lying_brokers.py
runs a short one).
"""

from __future__ import annotations

import argparse
import random
import struct
import sys

import fastkwire as fk
from fastkwire.proxy._rewrite import FIRST_VERSION, rewrite_addresses

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


def check(seed):
    rng = random.Random(seed)
    api_key = rng.choice(sorted(FIRST_VERSION))
    cls = fk.RESPONSE_CLASSES[api_key]
    version = rng.randrange(max(FIRST_VERSION[api_key], cls.MIN_VERSION), cls.MAX_VERSION + 1)
    try:
        frame = fk.encode_response(_message(rng, cls, version), version, seed & 0x7FFFFFFF)
    except ValueError:
        return "unencodable"  # a port out of the field's range: not an answer a broker sends
    frame = _mutate(rng, frame)
    offered = {}

    def mapped(address):
        return PROXY_HOST, offered.setdefault(address, 30001 + len(offered))

    try:
        new, named = rewrite_addresses(frame, api_key, version, mapped)
    except ValueError:
        return "refused"
    except Exception as e:  # noqa: BLE001 - the finding
        raise Finding(f"seed {seed}: {cls.__name__} v{version}: {type(e).__name__}: {e}") from e
    if new[4:8] != frame[4:8]:
        raise Finding(f"seed {seed}: the correlation id changed")
    try:
        _, msg, _ = fk.decode_response(new, api_key, version, records="view", trailing="keep")
    except ValueError as e:
        raise Finding(
            f"seed {seed}: {cls.__name__} v{version}: the rewritten frame does not decode: {e}"
        )
    left = [a for a in _every_address(msg.to_dict()) if not _named_ok(*a)]
    if left:
        raise Finding(f"seed {seed}: {cls.__name__} v{version}: told {left[:3]}")
    if set(offered) != set(named):
        raise Finding(
            f"seed {seed}: the mapping was offered {list(offered)[:5]}, the answer named {named[:5]}"
        )
    return "rewritten" if new is not frame else "unchanged"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    counts = {}
    for seed in range(args.seed, args.seed + args.loop):
        outcome = check(seed)
        counts[outcome] = counts.get(outcome, 0) + 1
    print(f"lying_broker: {args.loop} answers: {counts}")


if __name__ == "__main__":
    sys.exit(main())
