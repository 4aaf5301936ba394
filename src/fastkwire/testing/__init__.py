"""fastkwire.testing: a Kafka broker for test suites.

    from fastkwire.testing import Broker

    with Broker() as broker:                  # ready in milliseconds, on its own thread
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

As a pytest plugin (`pytest -p fastkwire.testing`, or, once installed, the `pytest11`
entry point), the `kafka_broker` fixture is a Broker started for the test
session. Loading the plugin imports nothing of the broker until a test asks for it.
"""

import sys

__all__ = ["Broker"]

if "pytest" in sys.modules:  # loaded as a plugin: the fixtures (pytest is not imported else)
    from ._plugin import kafka_broker  # noqa: F401


def __getattr__(name):
    if name == "Broker":
        from ._broker import Broker

        globals()["Broker"] = Broker
        return Broker
    raise AttributeError(name)
