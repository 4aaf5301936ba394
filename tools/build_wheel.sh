#!/usr/bin/env bash
# Build a manylinux wheel of fastkwire on this machine.
#
#   tools/build_wheel.sh [OUTDIR]      (default OUTDIR: wheelhouse/)
#
# `python -m build` makes the sdist and then builds the wheel from that sdist, so this
# also proves the sdist compiles without Cython; auditwheel then checks the wheel's
# symbol versions and retags it manylinux. PYTHON picks the interpreter (default python3).
#
# Needs: apt-get install patchelf; pip install build "auditwheel<6.8.1".
# Debian 12 ships patchelf 0.14.3, which auditwheel 6.8.1+ refuses because of a bug in
# renaming the shared libraries it grafts; this wheel grafts none (the wheel test checks).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/wheelhouse}" && cd "${1:-$root/wheelhouse}" && pwd)
python=${PYTHON:-python3}
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT

# A wheel that silently fell back to pure Python must not come out of here.
FASTKWIRE_REQUIRE_EXTENSION=1 "$python" -m build --outdir "$dist" "$root"
"$python" -m auditwheel repair --wheel-dir "$dist/repaired" "$dist"/*.whl
cp "$dist"/*.tar.gz "$dist"/repaired/*.whl "$out"/
# Last line: the wheel just made (the test that installs it reads this).
echo "$out/$(basename "$dist"/repaired/*.whl)"
