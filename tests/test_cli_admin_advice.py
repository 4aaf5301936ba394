"""describe-group and remove-members give advice in the command line's words: the flag
(`--security-protocol SSL`), where the library names its parameter (`security_protocol`)."""

import json

import pytest

from fakes import API_VERSIONS, Raw, run_cli, scripted  # noqa: F401 - scripted is a fixture
from fastkwire.admin import AdminClient, AdminError
from fastkwire.cli import _advice_in_flags

TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x46"  # what a TLS listener answers plaintext with


@pytest.mark.parametrize("command", ["describe-group", "remove-members"])
def test_a_tls_listener_advice_names_the_flag(scripted, command):  # noqa: F811
    broker = scripted(script={API_VERSIONS: [Raw(TLS_ALERT)]})
    args = [command, "--bootstrap-server", broker.address, "--group", "g", "--timeout", "5"]
    if command == "remove-members":
        args += ["--instance-id", "host-7"]
    done = run_cli(*args)
    assert done.returncode == 3
    assert "use --security-protocol SSL or SASL_SSL" in done.stderr
    assert "security_protocol" not in done.stderr
    done = run_cli(*args, "--json")
    assert "use --security-protocol SSL" in json.loads(done.stdout)["error"]["message"]


def test_the_library_keeps_its_parameter_names(scripted):  # noqa: F811
    broker = scripted(script={API_VERSIONS: [Raw(TLS_ALERT)]})
    with pytest.raises(AdminError, match="use security_protocol SSL or SASL_SSL"):
        AdminClient(broker.address, request_timeout_ms=5000).api_versions()


def test_only_advice_is_rewritten():
    assert _advice_in_flags("so use sasl_mechanism PLAIN") == "so use --sasl-mechanism PLAIN"
    # a group or member a broker named after a parameter stays as it is
    assert _advice_in_flags("group 'security_protocol' is empty") == (
        "group 'security_protocol' is empty"
    )
