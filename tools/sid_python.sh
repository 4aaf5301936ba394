#!/usr/bin/env bash
# CPython 3.14 and 3.15 from Debian sid's binary packages, in a sid root made by mmdebstrap
# into a cache outside the checkout (made once, reused after), and commands run inside it.
#
#   bash tools/sid_python.sh ensure              # make (or find) the root; prints its path
#   bash tools/sid_python.sh run CMD [ARG...]    # run CMD in the root, in this directory
#   bash tools/sid_python.sh venv 3.15 SDIST     # a venv in the root with fastkwire from
#                                                # SDIST and the test extra; prints its python
#
# `run` works in a private mount namespace (gone when CMD exits): /proc, /dev, and the
# checkout's parent directory (the checkout and anything beside it) are bind-mounted at
# the same paths, so paths mean the same inside and out. pip inside the root uses the
# host's pip configuration: its configuration files, the certificate bundle and the local
# files and directories it names (constraints, find-links, file:// indexes) are put at the
# same paths, and the PIP_* variables pass through. Needs root (mmdebstrap, chroot).
set -euo pipefail

cache="${FASTKWIRE_SID_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastkwire-sid}"
root="$cache/root"
mirror="${FASTKWIRE_SID_MIRROR:-http://deb.debian.org/debian}"
# The interpreters with their headers and venv, and a C compiler for the extension (and
# for peers that have no wheel for an interpreter yet, where a build is wanted).
packages=(python3.14-dev python3.14-venv python3.15-dev python3.15-venv gcc libc6-dev ca-certificates)
python="${FASTKWIRE_HOST_PYTHON:-python3}"

log() { echo "sid_python: $*" >&2; }

ensure() {
    local stamp="$root/.fastkwire-complete" want="${packages[*]}"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        log "cached in $root"
        echo "$root"
        return
    fi
    command -v mmdebstrap >/dev/null || {
        log "installing mmdebstrap"
        apt-get update -qq && apt-get install -y -qq mmdebstrap >/dev/null
    }
    local started=$SECONDS partial="$cache/root.partial"
    rm -rf "$partial" "$root"
    mkdir -p "$cache"
    # The archive's sid may be a snapshot whose Release file has expired: accept it (apt
    # still checks every file against the signed index).
    local aptopt='Acquire::Check-Valid-Until "false"'
    (IFS=,; mmdebstrap --quiet --variant=apt --aptopt="$aptopt" --include="${packages[*]}" \
        sid "$partial" "$mirror" >&2)
    # apt inside the root keeps the option too (an `apt-get update` there would fail without it)
    echo "$aptopt;" >"$partial/etc/apt/apt.conf.d/99fastkwire-valid-until"
    mv "$partial" "$root"
    echo "$want" >"$stamp"
    log "made in $((SECONDS - started)) s: $(chroot "$root" python3.14 -V) $(chroot "$root" python3.15 -V)"
    echo "$root"
}

# The host's pip configuration files, and the local paths its settings name, one per line:
# "file PATH" to copy in, "dir PATH" to bind-mount read-only.
pip_paths() {
    "$python" - <<'EOF'
import os, re, shlex, subprocess, sys

def pip(*args):
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True).stdout

paths = set(re.findall(r"^\s+(/\S+), exists: True$", pip("config", "debug"), re.M))
if os.environ.get("PIP_CONFIG_FILE"):
    paths.add(os.environ["PIP_CONFIG_FILE"])
values = [w for line in pip("config", "list").splitlines() if "=" in line
          for v in shlex.split(line.split("=", 1)[1]) for w in v.split()]
values += [v for k, val in os.environ.items() if k.startswith("PIP_") for v in val.split()]
for v in values:
    local_index = v.startswith("file://")
    v = v.removeprefix("file://")
    if os.path.isabs(v) and os.path.exists(v):
        # a file:// index's pages may link to its files by relative paths (../files): the
        # folder holding the index is mounted, not the index alone
        paths.add(os.path.dirname(v.rstrip("/")) if local_index and os.path.isdir(v) else v)
for p in sorted(paths):
    if os.path.exists(p):
        print("dir" if os.path.isdir(p) else "file", p)
EOF
}

run() {
    [ -f "$root/.fastkwire-complete" ] || { log "no root yet: run '$0 ensure' first"; exit 1; }
    local here share
    here="$(pwd -P)"
    share="$(dirname "$here")"
    # Files are copied (the root's own certificate bundle gives way to the host's); whole
    # directories are mounted below, in the namespace.
    local dirs=() kind p
    while read -r kind p; do
        [ -n "$p" ] || continue
        if [ "$kind" = file ]; then
            mkdir -p "$root$(dirname "$p")"
            cp -fL "$p" "$root$p"
        else
            dirs+=("$p")
        fi
    done < <(pip_paths)
    [ -e /etc/resolv.conf ] && cp -fL /etc/resolv.conf "$root/etc/resolv.conf"
    # exec: a signal to this script (a timeout's) reaches CMD itself
    # shellcheck disable=SC2016
    exec unshare --mount --propagation private bash -euc '
        root=$1 share=$2 here=$3 ndirs=$4
        shift 4
        mount --rbind /dev "$root/dev"
        mount -t proc proc "$root/proc"
        mkdir -p "$root$share" && mount --bind "$share" "$root$share"
        for ((i = 0; i < ndirs; i++)); do
            mkdir -p "$root$1" && mount --bind "$1" "$root$1" && mount -o remount,bind,ro "$root$1"
            shift
        done
        cd "$root$here"
        exec chroot "$root" env -u VIRTUAL_ENV HOME=/root \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            bash -c "cd \"\$1\" && shift && exec \"\$@\"" - "$here" "$@"
    ' - "$root" "$share" "$here" "${#dirs[@]}" "${dirs[@]}" "$@"
}

# A fresh venv for python$1 inside the root: fastkwire from the sdist $2 (its C is generated
# already, so each interpreter compiles it and nothing writes into the checkout), then the
# test extra's requirements that have a wheel for it (tools/install_extra.py: the tests of
# the rest skip, saying why).
venv() {
    local version=$1 sdist started=$SECONDS
    sdist="$(realpath "$2")"
    local venv="/opt/fastkwire-venv-$version" inside="/opt/fastkwire-sdist/${sdist##*/}"
    rm -rf "${root:?}$venv" "$root/opt/fastkwire-sdist"
    mkdir -p "$root/opt/fastkwire-sdist" && cp "$sdist" "$root$inside"
    (run "python$version" -m venv "$venv")
    (run "$venv/bin/python" -m pip install -q --upgrade pip) >&2
    (export FASTKWIRE_REQUIRE_EXTENSION=1 && run "$venv/bin/python" -m pip install -q "$inside" "pytest-xdist>=3") >&2
    (run "$venv/bin/python" tools/install_extra.py test) >&2
    log "python$version: venv $venv made in $((SECONDS - started)) s"
    echo "$venv/bin/python"
}

case "${1:-}" in
ensure) ensure ;;
venv)
    [ $# -eq 3 ] || { echo "usage: $0 venv VERSION SDIST" >&2; exit 2; }
    venv "$2" "$3"
    ;;
run)
    shift
    run "$@"
    ;;
*)
    echo "usage: $0 ensure | run CMD [ARG...] | venv VERSION SDIST" >&2
    exit 2
    ;;
esac
