# shellcheck shell=bash
# Environment that makes an unmodified libibverbs (rdma-core 65) load the MetaRoCE
# provider straight from a build directory, without installing anything into the
# (read-only) root filesystem.
#
#   . rdma-core-provider/env.sh BUILD_DIR          # exports into this shell
#   eval "$(rdma-core-provider/env.sh BUILD_DIR)"   # same, from a child process
#   rdma-core-provider/env.sh BUILD_DIR             # prints the export lines
#
# BUILD_DIR is the directory holding libmetaroce-rdmav65.so, as seen by the
# programs that will use it (e.g. the same path inside the test VM).
#
# What it sets and why (see README.md for how libibverbs 65 resolves drivers):
#   RDMAV_DRIVERS=BUILD_DIR/libmetaroce
#     libibverbs loads every name in this colon-separated list in addition to
#     the drivers named in /etc/libibverbs.d/*.driver. A name starting with "/"
#     is dlopen()ed as NAME-rdmav65.so, so no LD_LIBRARY_PATH and no config
#     directory is needed. (IBV_CONFIG_DIR is a compile-time constant, not an
#     environment variable.) Ignored for setuid programs.
# Any RDMAV_DRIVERS entries already set are kept (ours goes first).

_metaroce_env() {
    local dir=${1:-}
    if [ -z "$dir" ]; then
        echo "usage: env.sh BUILD_DIR" >&2
        return 2
    fi
    case "$dir" in /*) ;; *) dir=$(cd "$dir" 2>/dev/null && pwd || echo "$PWD/$dir") ;; esac
    dir=${dir%/}
    if ! ls "$dir"/libmetaroce-rdmav*.so >/dev/null 2>&1; then
        echo "env.sh: warning: no libmetaroce-rdmav*.so in $dir (not built, or a path only the VM sees)" >&2
    fi
    local drivers="$dir/libmetaroce"
    case ":${RDMAV_DRIVERS:-}:" in
        *":$drivers:"*) drivers=$RDMAV_DRIVERS ;;
        ::) ;;
        *) drivers="$drivers:$RDMAV_DRIVERS" ;;
    esac
    printf 'export RDMAV_DRIVERS=%q\n' "$drivers"
}

if [ "${BASH_SOURCE[0]:-$0}" != "$0" ]; then
    # Sourced: export into the caller's shell.
    eval "$(_metaroce_env "$@")"
    unset -f _metaroce_env
else
    _metaroce_env "$@"
fi
