#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs the KUnit suites built into rdma_metaroce.ko: they execute when the module is
# loaded; their KTAP results are read back from debugfs and re-emitted as TAP lines
# (one per test case) so the harness counts them.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
DBG=/sys/kernel/debug/kunit
SUITES="rdma_metaroce_device rdma_metaroce_proto rdma_metaroce_cq rdma_metaroce_ffi_abi rdma_metaroce_qp rdma_metaroce_ids rdma_metaroce_srq rdma_metaroce_net rdma_metaroce_mr rdma_metaroce_engine rdma_metaroce_spread rdma_metaroce_mcast ${METAROCE_KUNIT_EXTRA:-}"

ktap_header
rmmod rdma_metaroce 2>/dev/null
if ! mrc_insmod; then
    ktap_fail "rdma_metaroce loads (KUnit suites run at load)"
    ktap_finish; exit 1
fi
for suite in $SUITES; do
    res="$DBG/$suite/results"
    if [ ! -r "$res" ]; then
        ktap_fail "kunit suite $suite ran (no $res)"
        continue
    fi
    ktap_diag "kunit suite $suite:"
    sed 's/^/#   /' "$res"
    # Test-case result lines are indented one level ("    ok 1 name").
    cases=0
    while read -r status n name; do
        cases=$((cases + 1))
        if [ "$status" = ok ]; then ktap_pass "kunit $suite.$name"; else ktap_fail "kunit $suite.$name"; fi
    done < <(grep -E '^    (ok|not ok) [0-9]+ ' "$res" | sed -E 's/^    not ok /not_ok /; s/^    ok /ok /')
    [ "$cases" -gt 0 ] || ktap_fail "kunit suite $suite has test cases"
done
# A suite the module runs but this list misses would never be reported: every
# rdma_metaroce_* suite in debugfs must be listed above.
for d in "$DBG"/rdma_metaroce_*; do
    [ -d "$d" ] || continue
    case " $SUITES " in
        *" ${d##*/} "*) ;;
        *) ktap_fail "kunit suite ${d##*/} is listed in selftests/kunit/run.sh" ;;
    esac
done
rmmod rdma_metaroce
ktap_finish
