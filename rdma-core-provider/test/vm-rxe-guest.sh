#!/usr/bin/env bash
# Guest half of test-vm-rxe.sh (runs inside the test VM as root).
# Usage: vm-rxe-guest.sh PROVIDER_DIR      (results in $METAROCE_OUT)
set -euo pipefail
D=$1
OUT=${METAROCE_OUT:-/tmp}
DEV=rxe_mrtest
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*"; exit 1; }

step "soft-RoCE device $DEV on a veth pair"
if ! modprobe rdma_rxe 2>/dev/null; then
    for m in udp_tunnel ip6_udp_tunnel rdma_rxe; do
        grep -q "^$m " /proc/modules || insmod "$D/out-rxe/modules/$m.ko"
    done
fi
ip link add mrtest0 type veth peer name mrtest1
ip link set mrtest0 up
ip link set mrtest1 up
rdma link add "$DEV" type rxe netdev mrtest0
for _ in $(seq 50); do
    grep -q ACTIVE "/sys/class/infiniband/$DEV/ports/1/state" 2>/dev/null && break
    sleep 0.2
done
rdma link show
ibv_devices

log=$OUT/verbs-metaroce.log
step "1. verbs-smoke through the MetaRoCE provider, stages ctx..ah"
RDMAV_DRIVERS=$D/out-rxe/libmetaroce VERBS_LOG_LEVEL=4 VERBS_LOG_FILE=$log \
    "$D/out/verbs-smoke" -d "$DEV" -s ah
grep -q "metaroce provider: context opened" "$log" || fail "verbs-smoke did not go through the MetaRoCE provider"

step "2. ibv_devinfo -v through the MetaRoCE provider (test build that claims rxe)"
: > "$log"
RDMAV_DRIVERS=$D/out-rxe/libmetaroce VERBS_LOG_LEVEL=4 VERBS_LOG_FILE=$log \
    ibv_devinfo -v -d "$DEV" > "$OUT/devinfo-metaroce.txt"
head -n 30 "$OUT/devinfo-metaroce.txt"
grep -q "metaroce provider: context opened" "$log" || fail "the MetaRoCE provider did not open the context"
grep -E "state:\s+PORT_ACTIVE" "$OUT/devinfo-metaroce.txt" || fail "port not reported ACTIVE"
grep -E "GID\[\s*0\]" "$OUT/devinfo-metaroce.txt" || fail "no GID table"
echo "ok: ibv_devinfo -v served by the MetaRoCE provider ($(grep -c . "$OUT/devinfo-metaroce.txt") lines)"

step "3. CQ through the MetaRoCE provider on rxe (expected to fail: rxe's kernel wants its own udata)"
if RDMAV_DRIVERS=$D/out-rxe/libmetaroce "$D/out/verbs-smoke" -d "$DEV" -s cq; then
    echo "note: rxe accepted a CQ without udata"
else
    echo "expected: rxe refuses command-only CQs"
fi

step "4. control: verbs-smoke end to end with the stock rxe provider"
"$D/out/verbs-smoke" -d "$DEV"

step "5. control: the real MetaRoCE build does not claim rxe devices"
log2=$OUT/verbs-metaroce-real.log
RDMAV_DRIVERS=$D/out/libmetaroce VERBS_LOG_LEVEL=4 VERBS_LOG_FILE=$log2 \
    ibv_devinfo -d "$DEV" > /dev/null
! grep -q "metaroce provider" "$log2" || fail "the real build claimed an rxe device"
echo "ok: rxe device left to the rxe provider"

rdma link delete "$DEV"
echo
echo "vm-rxe: all steps passed"
