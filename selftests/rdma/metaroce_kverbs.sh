#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A kernel verbs consumer on MetaRoCE (kverbs/mrc_kverbs_test.c): two RC QPs of
# one device, connected through its own RoCE v2 GID, kernel memory through the
# PD's local DMA key, a CQ polled in softirq whose handlers post every later
# work request — as storage and file-system ULPs do — then a fast-registration
# MR (REG_MR, RDMA WRITE across its pages, LOCAL_INV, a refused WRITE). The
# test module's load fails if any step fails; on the debug kernel lockdep
# judges the locking of posting from softirq.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
TKO=${METAROCE_KVERBS_KO:-$HERE/kverbs/mrc_kverbs_test.ko}
cleanup() {
    rmmod mrc_kverbs_test 2>/dev/null
    rdma link del mrc0 2>/dev/null
    rm_hosts; rmmod rdma_metaroce 2>/dev/null; true
}
trap cleanup EXIT
cleanup
ktap_header
mk_hosts
mrc_insmod || { ktap_fail "load rdma_metaroce"; ktap_finish; exit 1; }
A rdma link add mrc0 type metaroce netdev veth0
check "mrc0 has its RoCE v2 GID for 198.18.0.1" wait_for 10 gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001
if [ ! -f "$TKO" ]; then
    ktap_fail "kernel consumer test module $TKO was not built"
else
    log=$(mktemp)
    if insmod "$TKO" dev=mrc0 count=1000 2>"$log"; then
        ktap_pass "a kernel consumer exchanges 1000 SENDs over one device, posting from softirq handlers"
    else
        ktap_fail "a kernel consumer exchanges 1000 SENDs over one device, posting from softirq handlers"
        sed 's/^/#   /' "$log"
    fi
    res=$(dmesg | grep 'mrc_kverbs_test: mrc0:' | tail -n1)
    ktap_diag "${res:-no result line}"
    if dmesg | grep -q 'mrc_kverbs_test: mrc0: fast-registration MR: .*PASS'; then
        ktap_pass "fast-registration MR: REG_MR, RDMA WRITE across its pages, LOCAL_INV, then the WRITE is refused (REM_ACCESS_ERR)"
    else
        ktap_fail "fast-registration MR: REG_MR, RDMA WRITE across its pages, LOCAL_INV, then the WRITE is refused (REM_ACCESS_ERR)"
        dmesg | grep 'mrc_kverbs_test' | tail -n 5 | sed 's/^/#   /'
    fi
    n=$(sed -n 's/.* \([0-9]*\) handlers in softirq.*/\1/p' <<<"$res")
    if [ "${n:-0}" -gt 0 ]; then
        ktap_pass "the completion handlers ran in softirq ($n of them) and posted from there"
    else
        ktap_fail "the completion handlers ran in softirq and posted from there"
    fi
    rmmod mrc_kverbs_test 2>/dev/null
    rm -f "$log"
fi
A rdma link del mrc0
check "rmmod rdma_metaroce after the kernel consumer" rmmod rdma_metaroce
ktap_finish
