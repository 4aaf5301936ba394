"""The pytest plugin: `pytest -p fastkwire.testing`, or the `pytest11` entry point."""

import pytest


@pytest.fixture(scope="session")
def kafka_broker():
    """A fastkwire Broker on 127.0.0.1, one for the test session: clients connect to
    `kafka_broker.bootstrap_servers`. Topics outlive a test: name them per test."""
    from ._broker import Broker

    with Broker() as broker:
        yield broker
