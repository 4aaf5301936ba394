"""Which messages and versions the tests that walk the protocol visit.

The default suite visits every version of the messages the project started with and
the newest version of every other message; with --run-slow (FASTKWIRE_SLOW_TESTS=1)
every version of everything.
"""

import os
from pathlib import Path

SEED_MESSAGES = frozenset(
    [
        n + k
        for n in ("ApiVersions", "FindCoordinator", "LeaveGroup", "StreamsGroupHeartbeat")
        for k in ("Request", "Response")
    ]
    + ["RequestHeader", "ResponseHeader"]
)
# Set by tests/conftest.py from --run-slow before any test module is collected.
EVERY_VERSION = bool(os.environ.get("FASTKWIRE_SLOW_TESTS"))


def versions(name, all_versions):
    """The versions of message `name` (out of `all_versions`, a range) to visit."""
    if EVERY_VERSION or name in SEED_MESSAGES:
        return list(all_versions)
    return [all_versions[-1]]


def pairs(names_and_versions):
    """[(name, version)] out of every (name, version) pair."""
    by_name = {}
    for name, v in names_and_versions:
        by_name.setdefault(name, []).append(v)
    return [(n, v) for n, vs in by_name.items() for v in versions(n, vs)]


# Apache Kafka's own message definitions (the JSON files under
# clients/src/main/resources/common/message/ of apache/kafka), which the converter's and
# the all-APIs tests read: FASTKWIRE_KAFKA_SCHEMAS, else a folder kafka-schemas in a
# folder shared beside the checkout.
KAFKA_SCHEMAS = Path(
    os.environ.get("FASTKWIRE_KAFKA_SCHEMAS")
    or Path(__file__).resolve().parents[2] / "shared" / "kafka-schemas"
)
NO_KAFKA_SCHEMAS = (
    f"Kafka's message definitions are not at {KAFKA_SCHEMAS}: set FASTKWIRE_KAFKA_SCHEMAS to a "
    "folder of them (clients/src/main/resources/common/message/*.json of an apache/kafka "
    "checkout) to run these"
)
