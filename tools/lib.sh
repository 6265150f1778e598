# Shared helpers for the MetaRoCE tool scripts (sourced, not run).
# shellcheck shell=bash

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Everything expensive (toolchain root, kernels) is cached outside the work tree so
# that CI on the same machine, in a fresh clone, reuses it. A fresh machine rebuilds.
CACHE=${METAROCE_CACHE:-/var/cache/metaroce}
mkdir -p "$CACHE"

say() { printf '\033[1m[metaroce %(%H:%M:%S)T]\033[0m %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }

# key FILE... : short content hash of the given files, used as a cache key.
key() { cat "$@" | sha256sum | cut -c1-12; }

root_key() { key "$REPO/tools/root-packages.txt" "$REPO/tools/mkroot"; }
# METAROCE_ROOT names another, already complete root for experiments (e.g. a copy with
# linux-perf added for selftests/bench/exp-profile.sh); tests and CI never set it.
root_dir() { echo "${METAROCE_ROOT:-$CACHE/root-$(root_key)}"; }
