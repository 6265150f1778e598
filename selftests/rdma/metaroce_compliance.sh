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
# The module's parameters for the run, as create_qp keys (the module does not show
# them in sysfs: the helper reports them to the suite). Cases that need other values
# of keys a module parameter sets run again at the end, on the module reloaded with
# them (the suite's --dut-setup; the helper's setup= lists the keys).
PORT=4792
BASE_CONF="paths=4 target_qdelay_us=1000"
MAPPED=0000:0000:0000:0000:0000:ffff:c612:0001   # 198.18.0.1, the DUT's address
cleanup() {
    rdma link del mrc0 2>/dev/null
    rm_hosts; rmmod rdma_metaroce 2>/dev/null; true
}
# module_params CONF: insmod's arguments for create_qp keys k=v (later ones win).
module_params() {
    local kv k
    declare -A p=()
    for kv in $1; do
        k=${kv%%=*}
        case $k in
        paths) k=num_paths ;;
        target_qdelay_us) k=cc_target_delay_us ;;
        ecn_g_shift) k=ecn_gain_shift ;;
        esac
        p[$k]=${kv#*=}
    done
    for k in "${!p[@]}"; do printf '%s=%s ' "$k" "${p[$k]}"; done
}
# load_dut CONF: the module loaded with BASE_CONF and CONF, and mrc0 on veth0 (hostA)
# with its RoCE v2 GID for 198.18.0.1. Fails with 2 if the module refuses the values
# (it loaded with others just before), else 1.
load_dut() {
    rdma link del mrc0 2>/dev/null
    rmmod rdma_metaroce 2>/dev/null
    # shellcheck disable=SC2046  # one word per parameter
    mrc_insmod udp_port=$PORT $(module_params "$BASE_CONF $1") || return 2
    A rdma link add mrc0 type metaroce netdev veth0 || return 1
    wait_for 10 gid_idx mrc0 $MAPPED
}
case "${1:-}" in
# The suite's --dut-setup and --dut-cmd (run in hostB): the DUT set up for another
# configuration, and the helper for the module as loaded.
--setup) load_dut "${2:-}"; exit ;;
--helper)
    exec ip netns exec hostA env PYTHONPATH="$HERE/../lib" python3 "$COMP/dut_verbs.py" \
        --dev mrc0 --gid-index "$(gid_idx mrc0 $MAPPED)" --addr 198.18.0.1 \
        --udp-port $PORT --conf "$BASE_CONF ${2:-}" ;;
esac
trap cleanup EXIT
cleanup
if ! python3 -c 'import scapy, pyverbs' 2>/dev/null; then
    echo "TAP version 13"; echo "1..0 # SKIP python3 scapy and pyverbs are needed"; exit 0
fi
mk_hosts
if ! load_dut ""; then
    echo "TAP version 13"; echo "not ok 1 load rdma_metaroce with mrc0 on veth0 (GID for 198.18.0.1)"
    echo "1..1"; exit 1
fi
# The suite (in hostB) starts the helper in hostA; its stderr goes to a log.
SELF="bash $HERE/$(basename "$0")"
B timeout -k 10 "${METAROCE_COMPLIANCE_TIMEOUT:-1500}" python3 "$COMP/suite.py" --target kernel \
    --dut-cmd "$SELF --helper '{conf}'" --dut-setup "$SELF --setup '{conf}'" \
    --tester-ip 198.18.0.2 --dut-ip 198.18.0.1 --port "$PORT" \
    --wait-scale "${METAROCE_COMPLIANCE_WAIT_SCALE:-4}" --dut-log "$OUTDIR/compliance-dut.log" \
    ${METAROCE_COMPLIANCE_ARGS:-}
rc=$?
# Diagnostics: the device's counters and any QP the helper left behind.
rdma statistic show link mrc0/1 | sed 's/^/# /'
rdma resource show qp link mrc0/1 | grep -v ' lqpn 1 ' | sed 's/^/# left: /'
exit $rc
