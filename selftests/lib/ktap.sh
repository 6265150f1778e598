# Minimal KTAP/TAP producer for MetaRoCE selftests (sourced).
# shellcheck shell=bash
KTAP_N=0 KTAP_FAILED=0 KTAP_SKIPPED=0 KTAP_MARK=$SECONDS

ktap_header() { echo "TAP version 13"; }
# A point that took 5 s or more since the previous one says so in a diagnostic line:
# the VM tiers run under a time bound, and this is where their time goes.
_ktap_took() {
    local took=$((SECONDS - KTAP_MARK))
    KTAP_MARK=$SECONDS
    [ "$took" -lt 5 ] || echo "# point $KTAP_N took $took s"
}
ktap_pass() { KTAP_N=$((KTAP_N + 1)); echo "ok $KTAP_N $*"; _ktap_took; }
ktap_fail() { KTAP_N=$((KTAP_N + 1)); KTAP_FAILED=$((KTAP_FAILED + 1)); echo "not ok $KTAP_N $*"; _ktap_took; }
ktap_skip() { KTAP_N=$((KTAP_N + 1)); KTAP_SKIPPED=$((KTAP_SKIPPED + 1)); echo "ok $KTAP_N $* # SKIP"; _ktap_took; }
ktap_diag() { echo "# $*"; }

# ktap_out_of_time DESCRIPTION: returns false while the VM tier's time for starting
# test points lasts (METAROCE_TESTS_END, seconds since the epoch, set by
# guest-run.sh). Once it has passed, the point is reported as skipped and the suite
# ends there, with its plan and its status so far (through its EXIT trap, which
# cleans up): the guest then still has time to save the kernel log and the kmemleak
# report that judge the points that did run. Ending at once matters: skipping point
# by point would still run the commands between the points, which in the debug guest
# of a slow machine took minutes. tools/check counts the point among the skipped.
ktap_out_of_time() {
    [ -n "${METAROCE_TESTS_END:-}" ] && [ "$(date +%s)" -ge "$METAROCE_TESTS_END" ] || return 1
    ktap_skip "$1 (not run, nor the rest of this suite: the VM tier's time ran out)"
    ktap_finish
    exit
}

# check DESCRIPTION COMMAND... : one test point from a command's exit status.
check() {
    local desc=$1; shift
    local out
    ktap_out_of_time "$desc"
    if out=$("$@" 2>&1); then
        ktap_pass "$desc"
    else
        ktap_fail "$desc"
        printf '%s\n' "$out" | sed 's/^/#   /' | head -n 20
    fi
}

# check_fails DESCRIPTION COMMAND... : the command must fail.
check_fails() {
    local desc=$1; shift
    local out
    ktap_out_of_time "$desc"
    if out=$("$@" 2>&1); then
        ktap_fail "$desc (unexpectedly succeeded)"
        printf '%s\n' "$out" | sed 's/^/#   /' | head -n 20
    else
        ktap_pass "$desc"
        printf '%s\n' "$out" | sed 's/^/#   got: /' | head -n 3
    fi
}

# wait_for SECONDS COMMAND... : poll a condition (every 0.1 s) until it holds or the
# bound expires. Used only for effects the kernel completes asynchronously (queued
# device unregistration); the bound makes a hang a test failure.
wait_for() {
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

ktap_finish() {
    echo "1..$KTAP_N"
    echo "# totals: $((KTAP_N - KTAP_FAILED - KTAP_SKIPPED)) passed, $KTAP_FAILED failed, $KTAP_SKIPPED skipped"
    [ "$KTAP_FAILED" = 0 ]
}

# mrc_insmod [PARAMS...] : load rdma_metaroce.ko ($KO) the way modprobe would, i.e.
# after the kernel modules it depends on (udp_tunnel is a module in most configs).
mrc_insmod() {
    modprobe -q udp_tunnel 2>/dev/null || true
    modprobe -q ip6_udp_tunnel 2>/dev/null || true
    insmod "$KO" "$@"
}
