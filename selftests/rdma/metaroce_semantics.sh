#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Verbs semantics over MetaRoCE between two namespaces (metaroce_semantics.py):
# SEND/WRITE with immediate, scatter/gather, unsignaled and inline sends, READ,
# atomics, and the errors: EINVAL on post, LOC_PROT_ERR, REM_ACCESS_ERR + flush.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
cleanup() {
    rdma link del mrc0 2>/dev/null; rdma link del mrc1 2>/dev/null
    rm_hosts; rmmod rdma_metaroce 2>/dev/null; true
}
trap cleanup EXIT
cleanup
mk_hosts
mrc_insmod || { echo "not ok 1 load rdma_metaroce"; exit 1; }
A rdma link add mrc0 type metaroce netdev veth0
B rdma link add mrc1 type metaroce netdev veth1
wait_for 10 gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001
wait_for 10 gid_idx mrc1 0000:0000:0000:0000:0000:ffff:c612:0002
GA=$(gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001)
GB=$(gid_idx mrc1 0000:0000:0000:0000:0000:ffff:c612:0002)
echo "TAP version 13"
A env PYTHONPATH="$HERE/../lib" timeout 120 python3 "$HERE/metaroce_semantics.py" "$GA" "$GB" > /tmp/semantics.tap
rc=$?
# The Python part numbers its own test points; continue after them.
grep -v '^1\.\.' /tmp/semantics.tap
KTAP_N=$(grep -cE '^(not )?ok ' /tmp/semantics.tap)
KTAP_FAILED=$(grep -c '^not ok ' /tmp/semantics.tap)
[ $rc = 0 ] || [ "$KTAP_FAILED" != 0 ] || KTAP_FAILED=1

# IPv6: the same devices, addressed by their IPv6 RoCE v2 GIDs.
ip -n hostA addr add 2001:2::1/64 dev veth0 nodad
ip -n hostB addr add 2001:2::2/64 dev veth1 nodad
check "IPv6 RoCE v2 GIDs appear" wait_for 10 gid_idx mrc1 2001:0002:0000:0000:0000:0000:0000:0002
G6A=$(gid_idx mrc0 2001:0002:0000:0000:0000:0000:0000:0001)
G6B=$(gid_idx mrc1 2001:0002:0000:0000:0000:0000:0000:0002)
listening() { B ss -ltn | grep -q ":$1 "; }
# pp6 PROG ARGS...: server in hostB, client in hostA, over the IPv6 GIDs.
pp6() {
    local prog=$1; shift
    B timeout 60 "$prog" -d mrc1 -g "$G6B" -p 18600 "$@" > /tmp/pp6.server 2>&1 &
    local spid=$!
    wait_for 20 listening 18600 || { kill $spid; return 1; }
    A timeout 60 "$prog" -d mrc0 -g "$G6A" -p 18600 "$@" 198.18.0.2 || { wait $spid; return 1; }
    wait $spid
}
check "ibv_rc_pingpong -c over IPv6 GIDs" pp6 ibv_rc_pingpong -c -n 50
check "ibv_ud_pingpong -c over IPv6 GIDs" pp6 ibv_ud_pingpong -c -n 50 -s 512

# Last, as it takes mrc1 away: `rdma link del` while a process holds an on-demand
# region with its pages in (spec MR-9.2.5). ib_core deregisters the region for the
# process; the process then drops its pages (an invalidation the device no longer
# sees) and exits, its descriptor closed on a device that is gone; the module
# unloads.
odp_link_del() {
    rm -f /tmp/odp.ready /tmp/odp.holder
    B env PYTHONPATH="$HERE/../lib" timeout 300 python3 - > /tmp/odp.holder 2>&1 <<'PY' &
import os
import time
import pyverbs.device as d
from pyverbs.mem_alloc import MAP_ANONYMOUS_, MAP_PRIVATE_, madvise, mmap
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE
from pyverbs_compat import e
ctx = d.Context(name='mrc1')
pd = PD(ctx)
n = 1 << 20
buf = mmap(length=n, flags=MAP_ANONYMOUS_ | MAP_PRIVATE_)
mr = MR(pd, n, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_ON_DEMAND, address=buf)
pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH, [SGE(buf, n, mr.lkey)])
open('/tmp/odp.ready', 'w').close()
while os.path.exists('/tmp/odp.ready'):
    time.sleep(0.01)
madvise(buf, n)
print('holder done', flush=True)
os._exit(0)
PY
    local pid=$!
    # Bounds for a hang, not waits: Python and pyverbs start in a second or two on
    # the plain kernel, but took over 20 s in the debug guest of a machine that
    # emulates it slowly (2026-12-05).
    wait_for 180 test -e /tmp/odp.ready || { echo "the holder was not ready within 180 s:"; cat /tmp/odp.holder; kill $pid; return 1; }
    timeout 30 rdma link del mrc1 || { echo "rdma link del failed or hung"; kill $pid; return 1; }
    rm -f /tmp/odp.ready
    wait $pid && grep -q 'holder done' /tmp/odp.holder
}
check "rdma link del while a process holds a prefetched on-demand region: the device goes, the process lives" odp_link_del
check "the module unloads afterwards" bash -c "rdma link del mrc0 && rmmod rdma_metaroce"
ktap_finish
