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
# Everything the kernel logs from here on is judged against the tests (tools/splat-check).
echo "metaroce-selftests: begin" > /dev/kmsg
rc=0
bash -c "$(cat "$OUT/.cmd")" >> "$OUT/guest.log" 2>&1 || rc=$?
if [ -w /sys/kernel/debug/kmemleak ]; then
    # kmemleak only reports objects older than 5 s and unreferenced in two scans.
    sleep 6
    echo scan > /sys/kernel/debug/kmemleak
    echo scan > /sys/kernel/debug/kmemleak
    cat /sys/kernel/debug/kmemleak > "$OUT/kmemleak.txt"
fi
{ dmesg; cat "$OUT/kmemleak.txt" 2>/dev/null; } > "$OUT/dmesg.txt"
echo "$rc" > "$OUT/guest-rc"
cat "$OUT/guest.log"
exit "$rc"
