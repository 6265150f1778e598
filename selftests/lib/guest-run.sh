#!/usr/bin/env bash
# Runs inside the test VM (started by tools/vm): executes the requested command,
# then saves the kernel log (plus any kmemleak report) to $METAROCE_OUT.
set -u
OUT=$METAROCE_OUT
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# Forget leaks that predate the tests (boot-time allocations are not ours to judge).
[ -w /sys/kernel/debug/kmemleak ] && echo clear > /sys/kernel/debug/kmemleak
echo "guest: $(uname -r), flavour ${METAROCE_FLAVOUR:-?}" > "$OUT/guest.log"
# Let unmodified verbs programs find the MetaRoCE provider in the repo's build dir.
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# tools/vm copied the module and the provider into $OUT for this run.
. "$REPO/rdma-core-provider/env.sh" "$OUT/provider"
export METAROCE_KO=$OUT/rdma_metaroce.ko
export METAROCE_KVERBS_KO=$OUT/mrc_kverbs_test.ko
# The time bound (tools/vm sets METAROCE_GUEST_END): the guest is stopped then, and
# what it has not saved by then is lost, the kernel log included. So suites are cut
# (run-tier.sh) in time for the kmemleak scan and the kernel log; before that, test
# points stop starting (ktap.sh) in time for a point already running to end. Both
# margins are several times what the debug kernel needs on a machine that emulates it
# slowly: a debug point runs for up to VB_TIMEOUT (240 s).
if [ -n "${METAROCE_GUEST_END:-}" ]; then
    if [ "${METAROCE_FLAVOUR:-}" = debug ]; then save=300 finish=300; else save=120 finish=120; fi
    export METAROCE_SUITES_END=$((METAROCE_GUEST_END - save))
    export METAROCE_TESTS_END=$((METAROCE_SUITES_END - finish))
    echo "guest: test points start until $(date -u -d "@$METAROCE_TESTS_END" +%H:%M:%S), suites are cut at $(date -u -d "@$METAROCE_SUITES_END" +%H:%M:%S), the guest is stopped at $(date -u -d "@$METAROCE_GUEST_END" +%H:%M:%S)" >> "$OUT/guest.log"
fi
# udev is not needed by the tests (device nodes come from devtmpfs) and in the debug
# guest it is still replaying the boot's coldplug when they start: virtme-init's
# settle gave up after 300 s, and at 830 s of uptime udevd was still running on a
# vCPU at about 10 s per event (2026-12-05, out/vm-debug-20261205-163728). Stop it.
udevadm control --exit 2>/dev/null || true
# Everything the kernel logs from here on is judged against the tests (tools/splat-check).
echo "metaroce-selftests: begin" > /dev/kmsg
rc=0
bash -c "$(cat "$OUT/.cmd")" >> "$OUT/guest.log" 2>&1 || rc=$?
if [ -w /sys/kernel/debug/kmemleak ]; then
    # kmemleak only reports objects older than 5 s and unreferenced in two scans.
    scan_start=$SECONDS
    sleep 6
    echo scan > /sys/kernel/debug/kmemleak
    echo scan > /sys/kernel/debug/kmemleak
    cat /sys/kernel/debug/kmemleak > "$OUT/kmemleak.txt"
    echo "guest: kmemleak scan took $((SECONDS - scan_start)) s" >> "$OUT/guest.log"
fi
{ dmesg; cat "$OUT/kmemleak.txt" 2>/dev/null; } > "$OUT/dmesg.txt"
echo "$rc" > "$OUT/guest-rc"
cat "$OUT/guest.log"
exit "$rc"
