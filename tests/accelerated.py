"""Differential runs of an accelerator (fastkwire.kafka_python, fastkwire.aiokafka): the
same function stock and accelerated, its value or its exception compared."""

import pytest


def accel_fixture(accelerator):
    """A fixture `accel` for a test module: accel(fn) -> (stock outcome, accelerated
    outcome), `accelerator` installed only around the second run."""

    @pytest.fixture
    def accel():
        assert not accelerator.installed()

        def both(fn):
            stock = outcome(fn)
            accelerator.install()
            try:
                fast = outcome(fn)
            finally:
                accelerator.uninstall()
            return stock, fast

        yield both
        accelerator.uninstall()

    return accel


def outcome(fn):
    """fn()'s value, or its exception as (type, args) with what it gave before raising."""
    got = []
    try:
        fn(got)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return got, (type(exc), exc.args)
    return got, None
