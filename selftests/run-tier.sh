#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Guest side of one VM test tier: runs each suite, saves its TAP to
# $METAROCE_OUT/<suite>.tap, and exits non-zero if any suite failed.
#   run-tier.sh SUITE...     (SUITE is a path relative to selftests/)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
rc=0
for suite in "$@"; do
    name=$(echo "$suite" | tr '/' '_' | sed 's/\.sh$//')
    echo "=== $suite ($(date -u +%H:%M:%S))"
    # The kernel log shows where each suite began (a splat is then easy to place).
    echo "metaroce-selftests: suite $suite" > /dev/kmsg 2>/dev/null || true
    start=$SECONDS
    if ! bash "$HERE/$suite" > "$METAROCE_OUT/$name.tap" 2>&1; then rc=1; fi
    cat "$METAROCE_OUT/$name.tap"
    echo "=== $suite took $((SECONDS - start)) s"
done
exit $rc
