#!/usr/bin/env bash
# aiokafka's whole test suite against `fastkwire broker`: its conftest starts a Kafka
# container (kafka_server) and fills each test class from it (setup_test_class); in the
# temporary copy both are overridden, at the end of its conftest, by fixtures that give
# the broker this script started. Prints the counts; exits non-zero when fewer than
# MIN_PASSED tests pass.
#
#   tools/broker_aiokafka_suite.sh [TARBALL] [MIN_PASSED]
#
# TARBALL holds aiokafka's pyproject.toml, requirements-ci.txt and tests/ tree under one
# folder named aiokafka-VERSION (default: ../shared/aiokafka-0.14.0-tests.tar.gz beside
# the checkout). It runs with the python on PATH, which must have aiokafka==VERSION and
# fastkwire (this checkout's, or PYTHONPATH=src); the suite's test requirements that it
# lacks (pytest, pytest-asyncio, pytest-mock, docker, async-timeout, cramjam) are
# installed into it at the versions of aiokafka's CI, and those it has are left alone.
# Deselected, as out of the broker's scope: tests/test_sasl.py (SASL users, ACLs and
# Kerberos scripted inside the Kafka container). Its TLS tests (an SSL listener beside the
# PLAINTEXT one, certificates the container makes) get a PLAINTEXT and an SSL listener on
# the one node and certificates made here (the `cryptography` package, tests/certs.py).
# AIOKAFKA_SUITE_K: a pytest -k expression, to run part of the suite (e.g. "ssl").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tarball="$(realpath "${1:-$root/../shared/aiokafka-0.14.0-tests.tar.gz}")"
min_passed="${2:-0}"
kafka_version="4.0.0"
started=$SECONDS

source "$root/tools/broker_start.sh"
unpack "$tarball" 'aiokafka-*' tests

for name in pytest pytest-asyncio pytest-mock docker async-timeout cramjam; do
    if ! python -m pip show -q "$name" >/dev/null 2>&1; then
        pin="$(grep -iE "^$name==" "$suite/requirements-ci.txt" || echo "$name")"
        python -m pip install -q "$pin"
    fi
done
version="${suite##*/aiokafka-}"
python -c "import aiokafka, fastkwire; print('aiokafka', aiokafka.__version__, '| fastkwire', fastkwire.implementation)"
python -c "import aiokafka, sys; sys.exit(aiokafka.__version__ != sys.argv[1])" "$version" \
    || { echo "these are aiokafka $version's tests: install aiokafka==$version" >&2; exit 2; }

# The certificates of its TLS tests, named as its container makes them (the client's key
# encrypted with the password they give).
ssl_dir="$work/ssl_cert"
python -c 'import sys; sys.path.insert(0, sys.argv[1]); import certs; certs.write_suite_files(sys.argv[2], client_key_password="abcdefgh")' \
    "$root/tests" "$ssl_dir"

# As aiokafka's container is configured: two partitions per auto-created topic, a
# PLAINTEXT and an SSL listener. Its tests ask for session timeouts down to 1 s (Kafka's
# image allows them).
listen="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
start_broker --partitions 2 --group-min-session-timeout-ms 1000 \
    --tls-cert "$ssl_dir/server.crt" --tls-key "$ssl_dir/server.key" --tls-client-ca "$ssl_dir/ca.crt"

# The override: later definitions in a module replace earlier ones of the same name.
cat >>"$suite/tests/conftest.py" <<EOF


# --- appended: an external broker instead of the Kafka container
@pytest.fixture(scope="session")
def kafka_server():
    host, port = "${address%:*}", ${address##*:}
    yield KafkaServer(host, port, ${ssl_address##*:}, None, None, None)


@pytest.fixture(scope="session")
def ssl_folder():
    return pathlib.Path("$ssl_dir")


@pytest.fixture(scope="class")
def setup_test_class(request, loop, kafka_server, ssl_folder):
    request.cls.loop = loop
    request.cls.kafka_host = kafka_server.host
    request.cls.kafka_port = kafka_server.port
    request.cls.kafka_ssl_port = kafka_server.ssl_port
    request.cls.ssl_folder = ssl_folder
    request.cls.hosts = kafka_server.hosts
    request.cls.kafka_version = "$kafka_version"
EOF

select=()
if [ -n "${AIOKAFKA_SUITE_K:-}" ]; then select=(-k "$AIOKAFKA_SUITE_K"); fi
cd "$suite"
set +e
# Deprecations of pytest and pytest-asyncio newer than its CI's are errors under the suite's
# filterwarnings: they are not what is measured here.
timeout 2400 python -m pytest -p no:cacheprovider -q -rfE -o asyncio_default_fixture_loop_scope=function -W ignore::pytest.PytestRemovedIn10Warning \
    --ignore tests/test_sasl.py ${select[@]+"${select[@]}"} tests >"$work/out.txt" 2>&1
set -e
grep -E '^(FAILED|ERROR) tests/' "$work/out.txt" || true
summary="$(tail -n 1 "$work/out.txt")"
echo "aiokafka $(basename "$suite") tests against fastkwire broker: $summary ($((SECONDS - started)) s)"
require_passed "$min_passed" "$summary"
