"""fastkwire.broker: a Kafka broker in memory, for tests and development.

Plain objects that tests drive without a socket (sans-IO, as the proxy is):
- `PartitionLog` (_log.py): one partition's record batches, offsets, log start and end;
- the producer-state table (_producers.py): producer ids, epochs, sequences;
- `Cluster` (_cluster.py): nodes, topics, configs;
- `Limits` (_limits.py): what a client may make the broker hold;
- `Apis` (_apis.py): a handler per API, from a decoded request to a response object;
- `GroupCoordinator` (_groups.py): consumer groups, classic and KIP-848, on a clock tests
  drive; the transaction coordinator (_transactions.py);
- `Authorizer` (_authorize.py): ACLs enforced as Kafka's StandardAuthorizer does, per API
  as KafkaApis checks (`Broker(authorizer=...)`).
`Broker` (_server.py) moves the bytes with asyncio; `fastkwire.testing.Broker` runs one on
its own thread, and `fastkwire broker` as a command. docs/broker.md says what it serves.
"""

from ._apis import Apis, Context
from ._authorize import Authorizer
from ._cluster import TOPIC_CONFIGS, Cluster, ClusterError
from ._groups import GroupConfig, GroupCoordinator
from ._limits import Limits
from ._log import LogError, PartitionLog, read_batch_head
from ._oauthbearer import InvalidToken, Token, UnsecuredValidator
from ._server import Broker

__all__ = [
    "Broker",
    "Apis",
    "Authorizer",
    "Context",
    "Cluster",
    "GroupConfig",
    "GroupCoordinator",
    "Limits",
    "ClusterError",
    "PartitionLog",
    "LogError",
    "read_batch_head",
    "TOPIC_CONFIGS",
    "InvalidToken",
    "Token",
    "UnsecuredValidator",
]
