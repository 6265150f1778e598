#!/usr/bin/env bash
# Runs the provider's command path against a real kernel's uverbs in the test VM,
# before the MetaRoCE module implements the verbs: a test-only build
# (make TEST_CLAIM_RXE=1, in out-rxe/) also claims soft-RoCE (rxe) devices, so
# ibv_devinfo -v and the context/query/PD/MR/AH verbs of verbs-smoke go through
# this provider's ibv_cmd_* calls into the kernel. CQ/QP/SRQ creation cannot
# work there (rxe's kernel driver insists on its own udata). verbs-smoke is also
# run end to end with the stock rxe provider, as a control of the test program.
#
# Usage: rdma-core-provider/test-vm-rxe.sh      (uses tools/vm; ~2-3 min under TCG)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

"$HERE/build" "$HERE/out" >/dev/null
SRC=$(cat "$HERE/out/include/RDMA_CORE_SRC")
"$REPO/tools/inroot" make -s -C "$HERE" O="$HERE/out" RDMA_CORE_SRC="$SRC" smoke
"$REPO/tools/inroot" make -s -C "$HERE" O="$HERE/out-rxe" RDMA_CORE_SRC="$SRC" TEST_CLAIM_RXE=1
# The guest cannot modprobe from the kernel build tree: ship rxe and its
# dependencies (built as modules in the test kernel) next to the test build.
KDIR=$("$REPO/tools/inroot" "$REPO/tools/mkkernel" plain)
mkdir -p "$HERE/out-rxe/modules"
for m in net/ipv4/udp_tunnel.ko net/ipv6/ip6_udp_tunnel.ko drivers/infiniband/sw/rxe/rdma_rxe.ko; do
    cp "$KDIR/$m" "$HERE/out-rxe/modules/"
done
exec "$REPO/tools/vm" --timeout 900 -- bash "$HERE/test/vm-rxe-guest.sh" "$HERE"
