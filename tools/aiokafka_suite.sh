#!/usr/bin/env bash
# aiokafka's own test suite, run stock and then with fastkwire.aiokafka installed
# (`-p fastkwire.aiokafka`); exits non-zero when the counts differ.
#
#   tools/aiokafka_suite.sh [TARBALL]
#
# TARBALL holds aiokafka's pyproject.toml and tests/ tree under one folder named
# aiokafka-VERSION (default: ../shared/aiokafka-0.14.0-tests.tar.gz beside the checkout).
# It is unpacked into a temporary folder with a fresh venv: aiokafka==VERSION, the test
# requirements of its CI that run without Docker (pytest, pytest-asyncio, pytest-mock,
# docker, async-timeout, cramjam at its CI's versions), and fastkwire built from this
# checkout. The tests that need a Kafka in Docker skip in both runs. Tests that fail in
# one run only are run again in both modes: a test failing in both reruns of one mode
# only is a difference, anything else is reported as flaky.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tarball="$(realpath "${1:-$root/../shared/aiokafka-0.14.0-tests.tar.gz}")"
started=$SECONDS

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work"
suite="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'aiokafka-*' -print -quit)"
[ -n "$suite" ] && [ -d "$suite/tests" ] || { echo "no aiokafka-VERSION/tests in $tarball" >&2; exit 2; }
version="${AIOKAFKA_VERSION:-${suite##*/aiokafka-}}"

python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "aiokafka==$version" pytest==9.0.2 pytest-asyncio==1.3.0 \
    pytest-mock==3.15.1 docker==7.1.0 async-timeout==5.0.1 cramjam==2.11.0
# FASTKWIRE_WHEEL: a wheel already built from this checkout (.ci/run's), else a build here
FASTKWIRE_REQUIRE_EXTENSION=1 python -m pip install -q "${FASTKWIRE_WHEEL:-$root}"
python -c "import aiokafka, fastkwire; print('aiokafka', aiokafka.__version__, '| fastkwire', fastkwire.implementation)"
echo "setup: $((SECONDS - started)) s"

# shellcheck source=tools/client_suite.sh
. "$root/tools/client_suite.sh"  # run and compare

# The plugin raises at configure time where it declines; check first that it installs here.
python -c "import fastkwire.aiokafka as a; a.install(); assert a.installed(); print('patches:', len(a.patches()))"

run stock tests
run plugin -p fastkwire.aiokafka tests
# and that the plugin's run had it installed (its report header; -q above hides it)
(cd "$suite" && python -m pytest -p no:cacheprovider -p fastkwire.aiokafka --co tests/test_partitioner.py) \
    | grep "fastkwire.aiokafka: installed=True" \
    || { echo "with -p fastkwire.aiokafka the accelerator was not installed" >&2; exit 1; }

compare fastkwire.aiokafka aiokafka
