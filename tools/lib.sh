# Shared helpers for the MetaRoCE tool scripts (sourced, not run).
# shellcheck shell=bash

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Everything expensive (toolchain root, kernels) is cached outside the work tree so
# that CI on the same machine, in a fresh clone, reuses it. A fresh machine rebuilds.
CACHE=${METAROCE_CACHE:-/var/cache/metaroce}
mkdir -p "$CACHE"

say() { printf '\033[1m[metaroce %(%H:%M:%S)T]\033[0m %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }
# guest_timeout TIMEOUT [DEADLINE]: the seconds a guest may run, TIMEOUT or fewer if
# DEADLINE (epoch s, tools/check's time budget) comes sooner; fails when it has passed.
guest_timeout() {
    local left
    [ -n "${2:-}" ] || { echo "$1"; return 0; }
    left=$(($2 - $(date +%s)))
    if [ "$left" -le 0 ]; then say "FAIL: no time left before the deadline to boot the guest"; return 1; fi
    [ "$left" -lt "$1" ] && say "the deadline leaves the guest $left s (of --timeout $1)"
    echo $((left < $1 ? left : $1))
}

# key FILE... : short content hash of the given files, used as a cache key.
key() { cat "$@" | sha256sum | cut -c1-12; }

root_key() { key "$REPO/tools/root-packages.txt" "$REPO/tools/mkroot"; }
# METAROCE_ROOT names another, already complete root for experiments (e.g. a copy with
# linux-perf added for selftests/bench/exp-profile.sh); tests and CI never set it.
root_dir() { echo "${METAROCE_ROOT:-$CACHE/root-$(root_key)}"; }
