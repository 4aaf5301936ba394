#!/usr/bin/env bash
# kafka-python's own test suite, run stock and then with fastkwire.kafka_python installed
# (`-p fastkwire.kafka_python`); exits non-zero when the counts differ.
#
#   tools/kafka_python_suite.sh [TARBALL]
#
# TARBALL holds kafka-python's pyproject.toml and test/ tree under one folder named
# kp-VERSION (default: ../shared/kafka-python-3.0.11-tests.tar.gz beside the checkout).
# It is unpacked into a temporary folder with a fresh venv: kafka-python==VERSION, the
# extras its codec tests use (crc32c, lz4, python-snappy, zstandard, xxhash), its pytest
# plugins, and fastkwire built from this checkout. Tests that fail in one run only are
# run again in both modes: a test failing in both reruns of one mode only is a difference,
# anything else is reported as flaky.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tarball="$(realpath "${1:-$root/../shared/kafka-python-3.0.11-tests.tar.gz}")"
started=$SECONDS

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work"
suite="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kp-*' -print -quit)"
[ -n "$suite" ] && [ -d "$suite/test" ] || { echo "no kp-VERSION/test in $tarball" >&2; exit 2; }
version="${KAFKA_PYTHON_VERSION:-${suite##*/kp-}}"

python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "kafka-python==$version" crc32c lz4 python-snappy zstandard xxhash \
    pytest pytest-mock pytest-timeout
# FASTKWIRE_WHEEL: a wheel already built from this checkout (.ci/run's), else a build here
FASTKWIRE_REQUIRE_EXTENSION=1 python -m pip install -q "${FASTKWIRE_WHEEL:-$root}"
python -c "import kafka, fastkwire; print('kafka-python', kafka.__version__, '| fastkwire', fastkwire.implementation)"
echo "setup: $((SECONDS - started)) s"

# run LABEL [pytest args...]: the summary line's counts go to $work/LABEL.counts and the
# failed test ids to $work/LABEL.failed.
run() {
    local label="$1"; shift
    local t0=$SECONDS
    (cd "$suite" && python -m pytest -q -p no:cacheprovider -rfE "$@") >"$work/$label.log" 2>&1 || true
    # pytest's closing line (threads may still log after it, so not simply the last line)
    local summary
    summary="$(grep -E '^=* ?[0-9]+ (passed|failed|errors?)\b.* in [0-9.]+s' "$work/$label.log" | tail -1)"
    [ -n "$summary" ] || { tail -20 "$work/$label.log"; echo "$label: no pytest summary line" >&2; exit 1; }
    grep -oE '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' <<<"$summary" \
        | sort -k2 >"$work/$label.counts"
    grep -E '^(FAILED|ERROR) ' "$work/$label.log" | awk '{print $2}' | sort -u >"$work/$label.failed" || true
    echo "$label: $summary [$((SECONDS - t0)) s]"
}

# The plugin raises at configure time where it declines; check first that it installs here.
python -c "import fastkwire.kafka_python as k; k.install(); assert k.installed(); print('patches:', len(k.patches()))"

run stock test
run plugin -p fastkwire.kafka_python test

status=0
if ! cmp -s "$work/stock.counts" "$work/plugin.counts"; then
    echo "counts differ: stock [$(tr '\n' ' ' <"$work/stock.counts")] plugin [$(tr '\n' ' ' <"$work/plugin.counts")]"
    mapfile -t ids < <(sort -u "$work/stock.failed" "$work/plugin.failed")
    [ "${#ids[@]}" -gt 0 ] || { echo "and no failed test to rerun" >&2; exit 1; }
    for id in "${ids[@]}"; do
        fails=""
        for mode in stock plugin; do
            n=0
            for _ in 1 2; do
                args=(); [ "$mode" = plugin ] && args=(-p fastkwire.kafka_python)
                (cd "$suite" && python -m pytest -q -p no:cacheprovider "${args[@]}" "$id") >/dev/null 2>&1 || n=$((n + 1))
            done
            fails="$fails $mode=$n/2"
        done
        case "$fails" in
            *" stock=0/2 plugin=2/2") echo "DIFFERENCE: $id fails with the plugin only"; status=1 ;;
            *" stock=2/2 plugin=0/2") echo "DIFFERENCE: $id fails stock only"; status=1 ;;
            *) echo "flaky (failed in reruns:$fails): $id" ;;
        esac
    done
else
    echo "same counts: $(tr '\n' ' ' <"$work/stock.counts")"
fi
echo "kafka-python suite, stock and with the plugin: $((SECONDS - started)) s"
exit $status
