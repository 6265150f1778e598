#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The compliance suite (selftests/compliance) against the kernel device: the DUT
# is an rdma_metaroce link on veth0 in hostA (198.18.0.1), driven by the verbs
# helper dut_verbs.py; the suite plays the peer from hostB (198.18.0.2) with
# plain UDP sockets on the module's port (the tester has no RDMA device).
# Re-emits the suite's TAP (cases the kernel cannot be configured for SKIP).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
COMP=$(cd "$HERE/../compliance" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
OUTDIR=${METAROCE_OUT:-/tmp}
cleanup() {
    rdma link del mrc0 2>/dev/null
    rm_hosts; rmmod rdma_metaroce 2>/dev/null; true
}
trap cleanup EXIT
cleanup
if ! python3 -c 'import scapy, pyverbs' 2>/dev/null; then
    echo "TAP version 13"; echo "1..0 # SKIP python3 scapy and pyverbs are needed"; exit 0
fi
mk_hosts
# Explicit module parameters (the module does not show them in sysfs): the helper
# reports them to the suite.
PORT=4792 PATHS=4 TARGET_US=1000
mrc_insmod udp_port=$PORT num_paths=$PATHS cc_target_delay_us=$TARGET_US ||
    { echo "TAP version 13"; echo "not ok 1 load rdma_metaroce"; echo "1..1"; exit 1; }
A rdma link add mrc0 type metaroce netdev veth0
if ! wait_for 10 gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001; then
    echo "TAP version 13"; echo "not ok 1 mrc0 has a RoCE v2 GID for 198.18.0.1"; echo "1..1"; exit 1
fi
GA=$(gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001)
# The suite (in hostB) starts the helper in hostA; its stderr goes to a log.
DUT="ip netns exec hostA env PYTHONPATH=$HERE/../lib python3 $COMP/dut_verbs.py --dev mrc0 --gid-index $GA --addr 198.18.0.1 --udp-port $PORT --num-paths $PATHS --cc-target-delay-us $TARGET_US"
B timeout -k 10 "${METAROCE_COMPLIANCE_TIMEOUT:-1200}" python3 "$COMP/suite.py" --target kernel \
    --dut-cmd "$DUT" --tester-ip 198.18.0.2 --dut-ip 198.18.0.1 --port "$PORT" \
    --wait-scale "${METAROCE_COMPLIANCE_WAIT_SCALE:-4}" --dut-log "$OUTDIR/compliance-dut.log" \
    ${METAROCE_COMPLIANCE_ARGS:-}
rc=$?
# Diagnostics: the device's counters and any QP the helper left behind.
rdma statistic show link mrc0/1 | sed 's/^/# /'
rdma resource show qp link mrc0/1 | grep -v ' lqpn 1 ' | sed 's/^/# left: /'
exit $rc
