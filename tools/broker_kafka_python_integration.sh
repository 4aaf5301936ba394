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

work="$(mktemp -d)"
broker_pid=""
cleanup() {
    if [ -n "$broker_pid" ]; then kill -TERM "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
tar xzf "$tarball" -C "$work"
suite="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kp-*' -print -quit)"
[ -n "$suite" ] && [ -d "$suite/test/integration" ] || { echo "no kp-VERSION/test/integration in $tarball" >&2; exit 2; }
mkdir -p "$suite/servers/$kafka_version/kafka-bin"

# As the suite's own broker is configured (servers/resources/default/kafka.properties):
# four partitions per auto-created topic, sessions down to one second.
python -m fastkwire broker --listen 127.0.0.1:0 --partitions 4 --group-min-session-timeout-ms 1000 >"$work/broker.out" 2>"$work/broker.err" &
broker_pid=$!
for _ in $(seq 100); do grep -q '^listening on ' "$work/broker.out" && break; sleep 0.1; done
address="$(sed -n 's/^listening on //p' "$work/broker.out")"
[ -n "$address" ] || { echo "fastkwire broker did not start:" >&2; cat "$work/broker.err" >&2; exit 3; }
echo "fastkwire broker on $address"

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
passed="$(( $(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0) + $(echo "$secure" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0) ))"
if [ "$passed" -lt "$min_passed" ]; then
    echo "fewer than $min_passed passed" >&2
    exit 1
fi
