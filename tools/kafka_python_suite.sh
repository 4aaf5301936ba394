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

# shellcheck source=tools/client_suite.sh
. "$root/tools/client_suite.sh"  # run and compare

# The plugin raises at configure time where it declines; check first that it installs here.
python -c "import fastkwire.kafka_python as k; k.install(); assert k.installed(); print('patches:', len(k.patches()))"

run stock test
run plugin -p fastkwire.kafka_python test

compare fastkwire.kafka_python kafka-python
