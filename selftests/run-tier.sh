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
    # Within the guest's time bound (guest-run.sh): a suite that would start after
    # its test points stopped starting is reported as one skipped point; one still
    # running when suites are cut is stopped, and its TAP, without a plan line, fails.
    bound=()
    if [ -n "${METAROCE_SUITES_END:-}" ]; then
        if [ "$(date +%s)" -ge "${METAROCE_TESTS_END:-0}" ]; then
            printf '%s\n' "TAP version 13" "ok 1 $suite # SKIP not started: the VM tier's time ran out" "1..1" \
                > "$METAROCE_OUT/$name.tap"
            cat "$METAROCE_OUT/$name.tap"
            continue
        fi
        bound=(timeout -k 10 $((METAROCE_SUITES_END - $(date +%s))))
    fi
    if ! "${bound[@]}" bash "$HERE/$suite" > "$METAROCE_OUT/$name.tap" 2>&1; then rc=1; fi
    cat "$METAROCE_OUT/$name.tap"
    echo "=== $suite took $((SECONDS - start)) s"
done
exit $rc
