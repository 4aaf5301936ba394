"""A pytest plugin for kafka-python's test/integration SSL and SASL tests: the brokers their
fixtures would start (KafkaFixture.instance with transport SSL, SASL_PLAINTEXT or SASL_SSL)
are fastkwire brokers in process instead, with the fixture's user (alice) and a throwaway
CA made with the `cryptography` package (its certificate where the fixture keeps its own,
`<ssl_dir>/ca-cert`). Used by tools/broker_kafka_python_security.sh; nothing of the suite
is changed.
"""

import datetime
import ipaddress
import os
import tempfile


def _certificates(directory):
    """ca-cert, server.pem and server.key in `directory`: a CA and a certificate for
    localhost and 127.0.0.1 that it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())

    def certificate(subject, public_key, ca):
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name("kafka-python suite CA"))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    paths = {n: os.path.join(directory, n) for n in ("ca-cert", "server.pem", "server.key")}
    with open(paths["ca-cert"], "wb") as f:
        f.write(certificate("kafka-python suite CA", ca_key.public_key(), True).public_bytes(pem))
    with open(paths["server.pem"], "wb") as f:
        f.write(certificate("localhost", key.public_key(), False).public_bytes(pem))
    with open(paths["server.key"], "wb") as f:
        f.write(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
    return paths


def pytest_configure(config):
    from fastkwire.testing import Broker
    from test.integration import fixtures

    KafkaFixture = fixtures.KafkaFixture
    started = []

    def instance(cls, broker_id, *args, transport="PLAINTEXT", sasl_mechanism=None, **kwargs):
        if transport.upper() == "PLAINTEXT" or kwargs.get("external"):
            return original(
                broker_id, *args, transport=transport, sasl_mechanism=sasl_mechanism, **kwargs
            )
        transport = transport.upper()
        settings = {"num_partitions": kwargs.get("partitions", 4)}
        ssl_dir = None
        if "SSL" in transport:
            ssl_dir = tempfile.mkdtemp(prefix="kafka-python-ssl-")
            paths = _certificates(ssl_dir)
            settings.update(tls_cert=paths["server.pem"], tls_key=paths["server.key"])
        if transport.startswith("SASL_"):
            settings["users"] = {cls.broker_user: cls.broker_password}
            settings["sasl_mechanisms"] = [sasl_mechanism.upper()]
        broker = Broker(**settings).start()
        started.append(broker)
        host, port = broker.addresses[0]
        fixture = cls(
            host, port, broker_id, transport=transport, sasl_mechanism=sasl_mechanism, external=True
        )
        fixture.ssl_dir = ssl_dir
        fixture.get_topic_names = lambda: broker.call(lambda: sorted(broker.broker.cluster.topics))
        return fixture

    original = KafkaFixture.instance
    KafkaFixture.instance = classmethod(instance)
    config._fastkwire_brokers = started


def pytest_unconfigure(config):
    for broker in getattr(config, "_fastkwire_brokers", ()):
        broker.stop()
