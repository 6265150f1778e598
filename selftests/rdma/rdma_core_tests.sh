#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# rdma-core's own Python test suite (tests/ of rdma-core 65, installed in the guest under
# /usr/share/doc/rdma-core/tests) against rdma_rxe and then against MetaRoCE, in one VM
# boot, compared test by test. rdma-core's tests open one device (--dev, --port 1,
# --gid: here the RoCE v2 GID of the IPv4 address) and run both players on it, so a
# device talks to itself; the rdma_cm tests connect to the device's netdev address.
# Each device gets veth0 (198.18.0.1, namespace hostA) to itself while its run lasts.
#
# TAP: one test point per rdma-core test that passes on rxe; MetaRoCE must pass it too.
# A test of a feature MetaRoCE does not offer (listed in ABSENT in rdma_core_tests.py:
# memory windows, ODP, UC, ...) whose result says the operation is unsupported
# (EOPNOTSUPP, "not supported") is "ok ... # SKIP"; any other failure is "not ok".
# Diagnostics: both devices' counts, the absent features, the failures with their
# error, MetaRoCE's skip reasons. In $METAROCE_OUT/rdma_core_tests/: rxe.log and metaroce.log (the raw
# output of each test, tracebacks), rxe.jsonl and metaroce.jsonl (one record per
# test), summary.json.
#
# Environment: RCT_TESTS="test_qp test_mr.MRTest" runs only those modules/classes/tests;
# RCT_TEST_TIMEOUT (default 90) bounds one test, RCT_BUDGET (default 900) one device's
# whole run, in seconds. Runs as root in the test VM.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${METAROCE_OUT:-/tmp}/rdma_core_tests
mkdir -p "$OUTDIR"
# shellcheck disable=SC2034  # verbs.sh keeps its logs there
VB_LOGDIR=$OUTDIR
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
. "$HERE/../lib/verbs.sh"
# shellcheck disable=SC2034  # read by mrc_insmod
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
RUNNER=$HERE/rdma_core_tests.py
TEST_TIMEOUT=${RCT_TEST_TIMEOUT:-90}
BUDGET=${RCT_BUDGET:-900}
# shellcheck disable=SC2206  # a list of words
ONLY=(${RCT_TESTS:-})

HUGEPAGES=/proc/sys/vm/nr_hugepages
HUGEPAGES_BEFORE=$(cat $HUGEPAGES)
cleanup() {
    rdma link del rxeA 2>/dev/null; rdma link del mrcA 2>/dev/null
    rm_hosts; modprobe -r rdma_rxe 2>/dev/null; rmmod rdma_metaroce 2>/dev/null
    echo "$HUGEPAGES_BEFORE" > $HUGEPAGES; true
}
trap cleanup EXIT
cleanup

# skip_point DESC REASON: a test of a feature MetaRoCE does not offer.
skip_point() { KTAP_N=$((KTAP_N + 1)); KTAP_SKIPPED=$((KTAP_SKIPPED + 1)); echo "ok $KTAP_N $1 # SKIP $2"; }

# The suite ships gzipped in some builds; a writable copy, unpacked.
find_tests() {
    local d
    for d in /usr/share/doc/rdma-core/tests /usr/share/doc/rdma-core/tests.gz; do
        [ -e "$d" ] || continue
        rm -rf "$OUTDIR/tests"
        mkdir -p "$OUTDIR/tests"
        if [ -d "$d" ]; then
            cp -r "$d"/. "$OUTDIR/tests/"
        fi
        find "$OUTDIR/tests" -name '*.gz' -exec gunzip -f {} +
        [ -f "$OUTDIR/tests/run_tests.py" ] && [ -f "$OUTDIR/tests/base.py" ] && return 0
    done
    return 1
}

# Processes a killed runner leaves in hostA (the rdma_cm tests fork their two players)
# keep the device's contexts open, and `rdma link del` of rxe waits for those.
kill_leftovers() {
    local pid
    for pid in $(ip netns pids hostA 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    true
}

nlines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }

# run_device NAME DEV: the suite against DEV (on veth0 in hostA) until every test has a
# result, resuming after a test that killed the runner; bounded by BUDGET.
run_device() {
    local name=$1 dev=$2 gid start deadline left rc=1 runs=0 before after
    gid=$(vb_gid_index "$dev" "$VB_ADDR_A") || { ktap_diag "$name: no RoCE v2 GID on $dev"; return 1; }
    ktap_diag "$name: $dev, port 1, GID index $gid (RoCE v2, $VB_ADDR_A)"
    rm -f "$OUTDIR/$name.jsonl" "$OUTDIR/$name.log"
    start=$(date +%s) deadline=$(( $(date +%s) + BUDGET ))
    while :; do
        left=$(( deadline - $(date +%s) ))
        if [ "$left" -le 0 ]; then
            ktap_diag "$name: budget of ${BUDGET}s exhausted; remaining tests not run"
            break
        fi
        runs=$((runs + 1))
        before=$(nlines "$OUTDIR/$name.jsonl")
        timeout -k 10 "$left" ip netns exec hostA python3 -X faulthandler "$RUNNER" run \
            --tests-dir "$OUTDIR/tests" --dev "$dev" --gid "$gid" --timeout "$TEST_TIMEOUT" \
            --results "$OUTDIR/$name.jsonl" ${ONLY[@]+--only "${ONLY[@]}"} \
            >> "$OUTDIR/$name.log" 2>&1
        rc=$?
        after=$(nlines "$OUTDIR/$name.jsonl")
        kill_leftovers
        [ $rc = 0 ] && break
        if [ "$after" = "$before" ]; then
            ktap_diag "$name: the runner failed before any test (exit $rc):"
            tail -n 5 "$OUTDIR/$name.log" | sed 's/^/#   /'
            break
        fi
        echo "# runner exit $rc; resuming after the test it was in" >> "$OUTDIR/$name.log"
        [ $runs -lt 50 ] || { ktap_diag "$name: runner died $runs times; giving up"; break; }
    done
    ktap_diag "$name: $(( $(date +%s) - start ))s, $runs runner process(es); log $OUTDIR/$name.log"
    [ $rc = 0 ]
}

ktap_header
check "rdma-core's Python tests in the guest ($OUTDIR/tests)" find_tests
# Its huge-page tests (traffic through on-demand regions of 2 MiB pages, a parent
# domain's buffers on them) skip on every device unless such pages are reserved:
# 32 of them, 64 MiB of the guest's 4 GiB.
check "32 huge pages of 2 MiB reserved" eval "echo 32 > $HUGEPAGES && [ \$(cat $HUGEPAGES) -ge 32 ]"
mk_hosts

# device NAME DEV TYPE LOAD UNLOAD: the suite on a DEV of link TYPE on veth0 (hostA),
# between the commands that load and unload its driver.
device() {
    local name=$1 dev=$2 type=$3 load=$4 unload=$5
    check "$load; rdma link add $dev type $type netdev veth0 (hostA)" \
        eval "$load && A rdma link add $dev type $type netdev veth0"
    check "$dev has a RoCE v2 GID for $VB_ADDR_A" wait_for 10 vb_gid_index "$dev" "$VB_ADDR_A"
    if run_device "$name" "$dev"; then ktap_pass "rdma-core tests on $dev ran to completion"
    else ktap_fail "rdma-core tests on $dev ran to completion"; fi
    check "rdma link del $dev; $unload" \
        eval "rdma link del $dev && wait_for 10 test ! -e $VB_SYS/$dev && $unload"
}
# The reference, then the device under test.
device rxe rxeA rxe "modprobe rdma_rxe" "modprobe -r rdma_rxe"
device metaroce mrcA metaroce mrc_insmod "rmmod rdma_metaroce"

# --- the comparison ---
if [ -s "$OUTDIR/rxe.jsonl" ]; then
    python3 "$RUNNER" compare --ref "rxe=$OUTDIR/rxe.jsonl" --dut "metaroce=$OUTDIR/metaroce.jsonl" \
        --json "$OUTDIR/summary.json" > "$OUTDIR/compare.txt" 2>&1
    check "comparison written ($OUTDIR/summary.json)" test -s "$OUTDIR/summary.json"
    while IFS=$'\t' read -r kind tid detail; do
        case $kind in
            PASS) ktap_pass "$tid" ;;
            SKIP) skip_point "$tid" "$detail" ;;
            FAIL) ktap_fail "$tid"; ktap_diag "  $detail" ;;
            '#'*) echo "$kind${tid:+	$tid}${detail:+	$detail}" ;;
        esac
    done < "$OUTDIR/compare.txt"
fi
ktap_finish
