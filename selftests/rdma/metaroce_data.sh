#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The data-path suite (selftests/lib/verbs.sh) on MetaRoCE: unmodified verbs programs
# (ibv_*_pingpong -c, perftest, rping) between two namespaces, clean and under netem
# loss/reordering, then a client killed mid-transfer and `rdma link del` under
# traffic. rxe_data.sh runs the same suite on rdma_rxe. Runs as root in the test VM.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
. "$HERE/../lib/verbs.sh"
# shellcheck disable=SC2034  # read by mrc_insmod
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}

# shellcheck disable=SC2034  # read by verbs.sh
VB_TYPE=metaroce VB_DEV_A=mrcA VB_DEV_B=mrcB VB_RX_COUNTER=rx_packets

cleanup() { vb_links_del; rm_hosts; rmmod rdma_metaroce 2>/dev/null; true; }
trap cleanup EXIT
cleanup

ktap_header
check "load rdma_metaroce" mrc_insmod
vb_suite
check "rmmod rdma_metaroce after the suite" rmmod rdma_metaroce

# rc_mtu: RC packets larger than verbs' largest MTU (4096) on a jumbo-frame link,
# with the data checked end to end.
vb_links_del; rm_hosts
check "load rdma_metaroce rc_mtu=9000" mrc_insmod rc_mtu=9000
mk_hosts
ip -n hostA link set veth0 mtu 9000; ip -n hostB link set veth1 mtu 9000
check "rdma link add $VB_DEV_A and $VB_DEV_B on 9000-byte veths" vb_links_add
check "both devices have their RoCE v2 GID" wait_for 10 vb_find_gids
vb_find_gids
vb_pingpong " with rc_mtu=9000 (64 KiB messages)" ibv_rc_pingpong -s 65536
# One direction only, so that A sends data packets and no ACKs: 64 KiB writes take 8
# packets of at most 8888 bytes (9000 - 112 of headers), 8 KiB each on average; with
# verbs' 4096-byte MTU they would take 16 of 4 KiB.
pk0=$(vb_counter "$VB_DEV_A" tx_packets) by0=$(vb_counter "$VB_DEV_A" tx_bytes)
vb_perftest " with rc_mtu=9000" ib_write_bw -s 65536
pk=$(( $(vb_counter "$VB_DEV_A" tx_packets) - pk0 )) by=$(( $(vb_counter "$VB_DEV_A" tx_bytes) - by0 ))
ktap_diag "$VB_DEV_A sent $pk packets, $by bytes"
check "its RDMA WRITE packets carried more than 6000 bytes each on average" \
    test "$pk" -gt 0 -a "$by" -gt $((pk * 6000))
vb_links_del; rm_hosts
check "rmmod rdma_metaroce" rmmod rdma_metaroce

# rc_mtu above Ethernet's jumbo frames, on a virtual link whose MTU allows it (MR-2.6.1
# allows up to 65000): 64 KiB messages travel as two 32 KiB packets.
check "load rdma_metaroce rc_mtu=32768" mrc_insmod rc_mtu=32768
mk_hosts
ip -n hostA link set veth0 mtu 65535; ip -n hostB link set veth1 mtu 65535
check "rdma link add $VB_DEV_A and $VB_DEV_B on 65535-byte veths" vb_links_add
check "both devices have their RoCE v2 GID" wait_for 10 vb_find_gids
vb_find_gids
vb_pingpong " with rc_mtu=32768 (64 KiB messages)" ibv_rc_pingpong -s 65536
pk0=$(vb_counter "$VB_DEV_A" tx_packets) by0=$(vb_counter "$VB_DEV_A" tx_bytes)
vb_perftest " with rc_mtu=32768" ib_write_bw -s 65536
pk=$(( $(vb_counter "$VB_DEV_A" tx_packets) - pk0 )) by=$(( $(vb_counter "$VB_DEV_A" tx_bytes) - by0 ))
ktap_diag "$VB_DEV_A sent $pk packets, $by bytes"
check "its RDMA WRITE packets carried more than 24000 bytes each on average" \
    test "$pk" -gt 0 -a "$by" -gt $((pk * 24000))
vb_links_del; rm_hosts
check "rmmod rdma_metaroce (rc_mtu=32768)" rmmod rdma_metaroce
ktap_finish
