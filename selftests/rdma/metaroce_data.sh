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
ktap_finish
