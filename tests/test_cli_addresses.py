"""`proxy --upstream` and `--bootstrap-server` read a broker by one rule: HOST:PORT, HOST
alone for Kafka's port 9092, [IPV6]:PORT."""

import pytest

from fastkwire.cli import build_parser


@pytest.mark.parametrize(
    "text, broker",
    [
        ("127.0.0.1", ("127.0.0.1", 9092)),
        ("localhost:19092", ("localhost", 19092)),
        ("[::1]:19092", ("::1", 19092)),
        ("::1", ("::1", 9092)),
    ],
)
def test_upstream_takes_what_bootstrap_server_takes(text, broker):
    from fastkwire.admin import parse_servers

    assert build_parser().parse_args(["proxy", "--upstream", text]).upstream == broker
    assert parse_servers(text) == [broker]


@pytest.mark.parametrize("text", ["a:1,b:2", "host:port", "host:99999", ""])
def test_upstream_is_one_broker(text, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["proxy", "--upstream", text])
    assert done.value.code == 2
    assert f"argument --upstream: {text!r} is not one broker" in capsys.readouterr().err
