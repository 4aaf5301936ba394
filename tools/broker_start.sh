# Shared by tools/broker_kafka_python_integration.sh and tools/broker_aiokafka_suite.sh
# (sourced, not run): a client library's tests unpacked into a scratch folder, run against
# a `fastkwire broker` process; on exit the broker is stopped and the folder removed.

work="$(mktemp -d)"
broker_pid=""
cleanup() {
    if [ -n "$broker_pid" ]; then kill -TERM "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# unpack TARBALL NAME-* PATH: $suite is the tarball's one folder named NAME-*, which must
# hold PATH.
unpack() {
    tar xzf "$1" -C "$work"
    suite="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name "$2" -print -quit)"
    [ -n "$suite" ] && [ -d "$suite/$3" ] || { echo "no ${2%\*}VERSION/$3 in $1" >&2; exit 2; }
}

# start_broker [FLAG...]: `fastkwire broker FLAG...` on a free port of 127.0.0.1 (or on
# the listeners $listen names, Kafka's listeners value); $address is its bootstrap address
# once it printed "listening on" (exit 3 when it did not), $ssl_address its SSL listener's
# when it has one beside.
start_broker() {
    python -m fastkwire broker --listen "${listen:-127.0.0.1:0}" "$@" >"$work/broker.out" 2>"$work/broker.err" &
    broker_pid=$!
    for _ in $(seq 100); do grep -qs '^listening on ' "$work/broker.out" && break; sleep 0.1; done
    address="$(sed -n 's/^listening on //p' "$work/broker.out")"
    ssl_address="$(sed -n 's/^listener SSL on //p' "$work/broker.out")"
    [ -n "$address" ] || { echo "fastkwire broker did not start:" >&2; cat "$work/broker.err" >&2; exit 3; }
    echo "fastkwire broker on $address"
}

# require_passed MIN SUMMARY...: exits 1 when the pytest summary lines given count fewer
# than MIN passed tests in all.
require_passed() {
    local min="$1" passed=0 line; shift
    for line in "$@"; do
        passed=$((passed + $(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)))
    done
    if [ "$passed" -lt "$min" ]; then
        echo "fewer than $min passed" >&2
        exit 1
    fi
}
