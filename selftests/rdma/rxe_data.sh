#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The data-path suite (selftests/lib/verbs.sh) on soft-RoCE (rdma_rxe): the baseline
# MetaRoCE is measured against, and a check that the suite itself is sound (every
# program it runs passes on a working RDMA device). Runs as root in the test VM.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
. "$HERE/../lib/verbs.sh"

# shellcheck disable=SC2034  # read by verbs.sh
VB_TYPE=rxe VB_DEV_A=rxeA VB_DEV_B=rxeB VB_RX_COUNTER=rcvd_pkts
# RoCE v2: a UD payload follows the BTH (12) and DETH (8).
# shellcheck disable=SC2034
VB_UDP_PORT=4791 VB_MAD_AT=$((20 + 8 + 12 + 8))

cleanup() { vb_links_del; rm_hosts; modprobe -r rdma_rxe 2>/dev/null; true; }
trap cleanup EXIT
cleanup

ktap_header
check "modprobe rdma_rxe" modprobe rdma_rxe
vb_suite
ktap_finish
