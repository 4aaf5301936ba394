#!/usr/bin/env bash
# Run the test suite and a fuzz loop against an AddressSanitizer build of the extension.
#
#   tools/asan.sh [PYTEST ARGS...]     (default: the whole suite, tests/)
#
# Copies src/ and setup.py to a temporary directory, builds both extensions there with
# -fsanitize=address (gcc or clang, whichever CC names), and runs the suite from this
# checkout with that copy first on the path, libasan preloaded into the ordinary
# interpreter and PYTHONMALLOC=malloc (so ASan sees the bounds of every Python object,
# not just pymalloc's arenas). Then FUZZ_INPUTS (default 100000) inputs of
# fuzz/fuzz_decode.py's loop (hostile bytes), ENCODE_FUZZ_INPUTS (default 100000) of
# fuzz/fuzz_encode.py's (hostile Python values) and REENTRANCY_INPUTS (default 5000) of
# fuzz/hostile_reentrancy.py's (gc callbacks and dunders rewriting what a routine
# holds, and other owners closing, replacing, dropping and reinstalling it),
# THREADED_INPUTS (default 400) of the same on four threads with an owner thread striking
# the running cases (fuzz/threaded.py), then FORWARDER_CASES (default 120) cases of
# fuzz/hostile_forwarder.py (hostile clients and upstreams through the proxy's compiled
# forwarding thread), FRAMEBUF_CASES (default 100000) of fuzz/hostile_framebuf.py (hostile
# calls on the broker's in-place frame buffer) and FRAMING_STEPS (default 5000) of
# fuzz/hostile_framing.py (hostile streams on 50 broker connections). Leak detection is
# off: CPython keeps much of its memory until exit by design; tests/test_memory.py looks
# for growth instead.
# Exit status 0 only if every step passed and ASan reported nothing. Takes 5-10 minutes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
cc=${CC:-gcc}
fuzz_inputs=${FUZZ_INPUTS:-100000}
encode_inputs=${ENCODE_FUZZ_INPUTS:-100000}
reentrancy_inputs=${REENTRANCY_INPUTS:-5000}
forwarder_cases=${FORWARDER_CASES:-120}
threaded_inputs=${THREADED_INPUTS:-400}
framebuf_cases=${FRAMEBUF_CASES:-100000}
framing_steps=${FRAMING_STEPS:-5000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

libasan=$("$cc" -print-file-name=libasan.so)
if [ ! -e "$libasan" ]; then
    echo "no libasan for $cc (Debian: apt-get install libasan8)" >&2
    exit 2
fi

echo "== building the extension with -fsanitize=address in $work"
cp -r "$root/src" "$root/setup.py" "$root/pyproject.toml" "$root/README.md" "$work/"
# Fresh C from the .pyx, and no extension built for the ordinary run.
find "$work/src" \( -name '*.so' -o -name '*.c' \) -delete
(
    cd "$work"
    CC="$cc" CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g -O1" \
        LDFLAGS="-fsanitize=address" FASTKWIRE_REQUIRE_EXTENSION=1 \
        "$python" setup.py -q build_ext --inplace >"$work/build.log" 2>&1
) || { tail -40 "$work/build.log"; exit 1; }
for so in "$work"/src/fastkwire/*.so; do
    # not `nm | grep -q`: grep stops at the first match and pipefail then sees nm's SIGPIPE
    nm -D "$so" >"$work/symbols.txt"
    grep -q __asan_ "$work/symbols.txt" || { echo "$so is not instrumented" >&2; exit 1; }
done

export PYTHONPATH="$work/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONMALLOC=malloc
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:log_path=$work/asan"
export FASTKWIRE_REQUIRE_EXTENSION=1
asan_run() { LD_PRELOAD="$libasan" "$python" "$@"; }

where=$(asan_run -c 'import fastkwire._engine as m; print(m.__file__)')
case "$where" in
    "$work"/*) echo "== extension under test: $where" ;;
    *) echo "the suite would test $where, not the ASan build" >&2; exit 1 ;;
esac

# Canary: an overflow of a Python object's buffer must be caught, or the run is blind.
canary='import ctypes; b = bytearray(64); ctypes.string_at(ctypes.addressof((ctypes.c_char * 64).from_buffer(b)), 128)'
caught=$(ASAN_OPTIONS=detect_leaks=0 asan_run -c "$canary" 2>&1 || true)
if grep -q heap-buffer-overflow <<<"$caught"; then
    echo "== canary: ASan catches a heap overflow in this interpreter"
else
    echo "ASan did not catch the canary overflow: the run would prove nothing" >&2
    exit 1
fi

status=0
echo "== test suite under ASan"
(cd "$root" && asan_run -m pytest -q -p no:cacheprovider "${@:-tests/}") || status=1
# The fuzz loops side by side (each is one process); their output after each other.
echo "== fuzz loops under ASan: $fuzz_inputs decode, $encode_inputs encode, $reentrancy_inputs reentrancy and $threaded_inputs threaded reentrancy inputs"
(cd "$work" && asan_run "$root/fuzz/fuzz_decode.py" --loop "$fuzz_inputs" --seed 8) \
    >"$work/fuzz_decode.log" 2>&1 &
decode_pid=$!
(cd "$work" && asan_run "$root/fuzz/hostile_reentrancy.py" --loop "$reentrancy_inputs" --seed 8) \
    >"$work/fuzz_reentrancy.log" 2>&1 &
reentrancy_pid=$!
(cd "$work" && asan_run "$root/fuzz/threaded.py" hostile_reentrancy --threads 4 --inputs "$threaded_inputs") \
    >"$work/fuzz_threaded.log" 2>&1 &
threaded_pid=$!
(cd "$work" && asan_run "$root/fuzz/fuzz_encode.py" --loop "$encode_inputs" --seed 8) \
    >"$work/fuzz_encode.log" 2>&1 || status=1
wait "$decode_pid" || status=1
wait "$reentrancy_pid" || status=1
wait "$threaded_pid" || status=1
cat "$work/fuzz_decode.log" "$work/fuzz_encode.log" "$work/fuzz_reentrancy.log" "$work/fuzz_threaded.log"
echo "== hostile clients through the compiled forwarder under ASan: $forwarder_cases cases"
(cd "$work" && asan_run "$root/fuzz/hostile_forwarder.py" --cases "$forwarder_cases") || status=1
echo "== the broker's frame buffer under ASan: $framebuf_cases hostile call cases, $framing_steps steps of hostile streams"
(cd "$work" && asan_run "$root/fuzz/hostile_framebuf.py" --loop "$framebuf_cases" --seed 8) || status=1
(cd "$work" && asan_run "$root/fuzz/hostile_framing.py" --steps "$framing_steps" --seed 8) || status=1

if compgen -G "$work/asan.*" >/dev/null; then
    echo "== AddressSanitizer reports:" >&2
    cat "$work"/asan.* >&2
    status=1
fi
if [ "$status" -eq 0 ]; then
    echo "ASan: suite passed, $fuzz_inputs decode, $encode_inputs encode, $reentrancy_inputs reentrancy and $threaded_inputs threaded reentrancy fuzz inputs, $forwarder_cases forwarder cases, $framebuf_cases frame buffer cases, $framing_steps framing steps, no AddressSanitizer reports"
fi
exit "$status"
