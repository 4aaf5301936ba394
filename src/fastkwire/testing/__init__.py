"""fastkwire.testing: a Kafka broker for test suites.

    from fastkwire.testing import Broker

    with Broker() as broker:                  # ready in milliseconds, on its own thread
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

As a pytest plugin (`pytest -p fastkwire.testing`, or installed: the `fastkwire` entry point
of `pytest11`), the `kafka_broker` fixture is a Broker started for the test session.
"""

from ._broker import Broker
from ._plugin import kafka_broker

__all__ = ["Broker", "kafka_broker"]
