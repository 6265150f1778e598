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
    echo "=== $suite"
    if ! bash "$HERE/$suite" > "$METAROCE_OUT/$name.tap" 2>&1; then rc=1; fi
    cat "$METAROCE_OUT/$name.tap"
done
exit $rc
