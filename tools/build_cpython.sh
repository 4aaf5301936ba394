#!/usr/bin/env bash
# Build CPython from Debian's source package, the default and the free-threaded
# (--disable-gil) interpreter, into a cache outside the checkout; reuse a finished build.
#
#   bash tools/build_cpython.sh            # builds (or finds) both, prints their paths
#   bash tools/build_cpython.sh default    # or: freethreaded
#
# Prints one line per interpreter: "<flavour> <path to python>". The source comes from
# Debian's archive through apt (which checks its hashes against the signed index), with a
# private sources list and state directory: the machine's apt setup is left untouched.
# The build is a fast one (no PGO, no LTO, no test run, no test modules installed); the
# script checks that the modules the suite and pip need (ssl, ctypes, zlib, bz2, lzma,
# _uuid, sqlite3) import before it marks a build finished.
set -euo pipefail

version="${CPYTHON_VERSION:-3.13.5}"
debian_version="${CPYTHON_DEBIAN_VERSION:-3.13.5-2+deb13u5}"
suite="${CPYTHON_DEBIAN_SUITE:-trixie}"
series="${version%.*}"
cache="${FASTKWIRE_CPYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastkwire-cpython}"
flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(default freethreaded)

log() { echo "build_cpython: $*" >&2; }

prefix_of() { echo "$cache/$version-$1"; }
python_of() {
    if [ "$1" = freethreaded ]; then echo "$(prefix_of "$1")/bin/python${series}t"; else echo "$(prefix_of "$1")/bin/python$series"; fi
}

fetch_source() {
    local src="$cache/src"
    local tarball="$src/python${series}_$version.orig.tar.xz"
    if [ ! -f "$tarball" ]; then
        local apt="$cache/apt"
        mkdir -p "$apt/lists/partial" "$src"
        printf 'deb-src http://deb.debian.org/debian %s main\ndeb-src http://deb.debian.org/debian %s-updates main\ndeb-src http://deb.debian.org/debian-security %s-security main\n' \
            "$suite" "$suite" "$suite" >"$apt/sources.list"
        local opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
            -o "Dir::State::Lists=$apt/lists" -o APT::Get::List-Cleanup=0)
        log "fetching python$series=$debian_version from Debian's $suite sources"
        apt-get "${opts[@]}" update >&2
        (cd "$src" && apt-get "${opts[@]}" source --download-only "python$series=$debian_version" >&2)
    fi
    if [ ! -d "$src/Python-$version" ]; then
        tar -C "$src" -xJf "$tarball"
    fi
    echo "$src/Python-$version"
}

ensure_build_deps() {
    local missing=()
    for p in gcc make libssl-dev zlib1g-dev libbz2-dev liblzma-dev libffi-dev uuid-dev libsqlite3-dev; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

build() {
    local flavour=$1 srcdir prefix build_dir started=$SECONDS
    prefix=$(prefix_of "$flavour")
    srcdir=$(fetch_source)
    build_dir="$cache/build-$version-$flavour"
    rm -rf "$build_dir" "$prefix"
    mkdir -p "$build_dir"
    local extra=()
    [ "$flavour" = freethreaded ] && extra+=(--disable-gil)
    log "building $flavour in $build_dir"
    (
        cd "$build_dir"
        "$srcdir/configure" -q --prefix="$prefix" --without-ensurepip --disable-test-modules \
            "${extra[@]}" >"$build_dir/configure.log" 2>&1
        make -s -j"$(nproc)" >"$build_dir/make.log" 2>&1
        make -s install COMPILEALL_OPTS=-j0 >"$build_dir/install.log" 2>&1
    ) || { log "build failed: see $build_dir/*.log"; tail -30 "$build_dir"/*.log >&2; return 1; }
    "$(python_of "$flavour")" -c "import ssl, ctypes, zlib, bz2, lzma, _uuid, sqlite3, venv, ensurepip" ||
        { log "$flavour: a needed module did not build (see $build_dir/make.log)"; return 1; }
    touch "$prefix/.fastkwire-complete"
    rm -rf "$build_dir"
    log "$flavour built in $((SECONDS - started)) s"
}

for flavour in "${flavours[@]}"; do
    case "$flavour" in default | freethreaded) ;; *)
        echo "usage: $0 [default] [freethreaded]" >&2
        exit 2
        ;;
    esac
    if [ ! -f "$(prefix_of "$flavour")/.fastkwire-complete" ]; then
        ensure_build_deps
        build "$flavour"
    else
        log "$flavour: cached in $(prefix_of "$flavour")"
    fi
    echo "$flavour $(python_of "$flavour")"
done
