#!/usr/bin/env bash
# kafka-python's own integration tests (test/integration) against `fastkwire broker`: the
# suite takes an external broker from KAFKA_URI and KAFKA_VERSION, and wants a
# servers/<KAFKA_VERSION>/kafka-bin folder to exist (it never runs it). Prints the counts;
# exits non-zero when fewer than MIN_PASSED tests pass.
#
#   tools/broker_kafka_python_integration.sh [TARBALL] [MIN_PASSED]
#
# TARBALL holds kafka-python's test/ tree under one folder named kp-VERSION (default:
# ../shared/kafka-python-3.0.11-tests.tar.gz beside the checkout). It runs with the python
# on PATH, which must have kafka-python, pytest, pytest-timeout, cryptography and fastkwire
# (this checkout's, or PYTHONPATH=src). The SSL and SASL tests start brokers of their own
# (no KAFKA_URI): they run in a second pass, where tools/kafka_python_secure_brokers.py
# makes those fastkwire brokers in process (SSL, SASL_PLAINTEXT with PLAIN and SCRAM);
# MIN_PASSED counts both passes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tarball="$(realpath "${1:-$root/../shared/kafka-python-3.0.11-tests.tar.gz}")"
min_passed="${2:-0}"
kafka_version="4.0.0"

source "$root/tools/broker_start.sh"
unpack "$tarball" 'kp-*' test/integration
mkdir -p "$suite/servers/$kafka_version/kafka-bin"

# As the suite's own broker is configured (servers/resources/default/kafka.properties):
# four partitions per auto-created topic, sessions down to one second.
start_broker --partitions 4 --group-min-session-timeout-ms 1000

cd "$suite"
set +e
KAFKA_VERSION="$kafka_version" KAFKA_URI="PLAINTEXT://$address" \
    timeout 1500 python -m pytest -p no:cacheprovider -q -o addopts= --timeout 60 -rfE \
    --ignore test/integration/test_ssl_integration.py \
    --ignore test/integration/test_sasl_integration.py \
    test/integration >"$work/out.txt" 2>&1
KAFKA_VERSION="$kafka_version" PYTHONPATH="$root/tools${PYTHONPATH:+:$PYTHONPATH}" \
    timeout 600 python -m pytest -p no:cacheprovider -p kafka_python_secure_brokers -q \
    -o addopts= --timeout 60 -rfE \
    test/integration/test_ssl_integration.py test/integration/test_sasl_integration.py \
    >"$work/secure.txt" 2>&1
set -e
grep -E '^(FAILED|ERROR) ' "$work/out.txt" "$work/secure.txt" || true
summary="$(tail -n 1 "$work/out.txt")"
secure="$(tail -n 1 "$work/secure.txt")"
echo "kafka-python $(basename "$suite") test/integration against fastkwire broker: $summary"
echo "its SSL and SASL tests against fastkwire brokers in process: $secure"
require_passed "$min_passed" "$summary" "$secure"
