"""Certificates made for the tests (the `cryptography` package): a CA, a server certificate
for 127.0.0.1 and localhost, a client certificate, and a second CA that signed neither.

They meet RFC 5280's profile, which a strict verifier (VERIFY_X509_STRICT, Python 3.13's
default) checks: key identifiers, a critical basicConstraints, keyUsage. `lax_ca` and
`lax_server_cert` are a pair made as older tools made them (no key identifiers, no
keyUsage), which only a verifier that is not strict accepts.

`tls_files` (session fixture) writes them as PEM files and returns their paths;
`server_context(files)` is an ssl context for a TLS listener with them.
"""

import datetime
import ipaddress
import ssl
from types import SimpleNamespace

import pytest

KEY_PASSWORD = "key-pass-4f1c"


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject, key, issuer, issuer_key, ca=False, names=(), ips=(), lax=False):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not lax:
        usage = dict.fromkeys(
            ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement")
            + ("key_cert_sign", "crl_sign", "digital_signature", "encipher_only", "decipher_only"),
            False,
        )
        usage.update(
            {"key_cert_sign": True, "crl_sign": True} if ca else {"digital_signature": True}
        )
        builder = (
            builder.add_extension(x509.KeyUsage(**usage), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                critical=False,
            )
        )
        if not ca:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
    if names or ips:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names]
                + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path, *objects, password=None):
    from cryptography.hazmat.primitives import serialization

    out = b""
    for obj in objects:
        if hasattr(obj, "private_bytes"):
            encryption = (
                serialization.BestAvailableEncryption(password.encode())
                if password
                else serialization.NoEncryption()
            )
            out += obj.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
            )
        else:
            out += obj.public_bytes(serialization.Encoding.PEM)
    path.write_bytes(out)
    return str(path)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    pytest.importorskip("cryptography")
    d = tmp_path_factory.mktemp("tls")
    ca_key, other_key = _key(), _key()
    ca = _certificate("fastkwire test CA", ca_key, "fastkwire test CA", ca_key, ca=True)
    other = _certificate("another CA", other_key, "another CA", other_key, ca=True)
    server_key, client_key = _key(), _key()
    server = _certificate(
        "broker", server_key, "fastkwire test CA", ca_key, names=["localhost"], ips=["127.0.0.1"]
    )
    wrong_name = _certificate(
        "broker", server_key, "fastkwire test CA", ca_key, names=["elsewhere.example"]
    )
    client = _certificate("ops", client_key, "fastkwire test CA", ca_key)
    lax_ca_key = _key()
    lax_ca = _certificate("old-tools CA", lax_ca_key, "old-tools CA", lax_ca_key, ca=True, lax=True)
    lax_server = _certificate(
        "broker", server_key, "old-tools CA", lax_ca_key, ips=["127.0.0.1"], lax=True
    )
    return SimpleNamespace(
        dir=str(d),
        ca=_write(d / "ca.pem", ca),
        other_ca=_write(d / "other-ca.pem", other),
        server_cert=_write(d / "server.pem", server),
        server_key=_write(d / "server.key", server_key),
        wrong_name_cert=_write(d / "wrong-name.pem", wrong_name),
        client_cert=_write(d / "client.pem", client),
        client_key=_write(d / "client.key", client_key, password=KEY_PASSWORD),
        client_bundle=_write(
            d / "client-bundle.pem", client, client_key
        ),  # cert and key in one file
        key_password=KEY_PASSWORD,
        lax_ca=_write(d / "lax-ca.pem", lax_ca),
        lax_server_cert=_write(d / "lax-server.pem", lax_server),
    )


def server_context(files, cert=None, require_client_cert=False):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert or files.server_cert, files.server_key)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(files.ca)
    return context


def write_suite_files(directory, client_key_password=None):
    """A CA, a server certificate for 127.0.0.1 and localhost and a client one, written into
    `directory` as the SSL tests of a client's own suite name them: ca.crt, server.crt,
    server.key, client.crt, client.key (encrypted with `client_key_password`)."""
    import pathlib

    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key, server_key, client_key = _key(), _key(), _key()
    ca = _certificate("fastkwire test CA", ca_key, "fastkwire test CA", ca_key, ca=True)
    server = _certificate(
        "broker", server_key, "fastkwire test CA", ca_key, names=["localhost"], ips=["127.0.0.1"]
    )
    client = _certificate("client", client_key, "fastkwire test CA", ca_key)
    _write(d / "ca.crt", ca)
    _write(d / "server.crt", server)
    _write(d / "server.key", server_key)
    _write(d / "client.crt", client)
    _write(d / "client.key", client_key, password=client_key_password)
    return d
