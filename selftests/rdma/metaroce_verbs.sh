#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Verbs objects through unmodified rdma-core: the provider matches MetaRoCE devices
# (whatever their name), ibv_devinfo reports the port, and contexts, PDs and CQs
# are created and destroyed with the errno rdma-core's tests expect on bad input.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}

cleanup() { rmmod rdma_metaroce 2>/dev/null; rm_hosts; }
trap cleanup EXIT
cleanup

ktap_header
insmod "$KO"
mk_hosts
A rdma link add mrc0 type metaroce netdev veth0
B rdma link add fabric7 type metaroce netdev veth1

check "ibv_devices lists mrc0" bash -c "ibv_devices | grep -qw mrc0"
check "the provider matches any link name (fabric7), by the parent's modalias" bash -c "ibv_devices | grep -qw fabric7 && grep -qx platform:rdma_metaroce /sys/class/infiniband/fabric7/device/modalias"
check "ibv_devinfo -v: port 1 PORT_ACTIVE, link layer Ethernet" bash -c "ibv_devinfo -v -d mrc0 > /tmp/devinfo && grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo && grep -q 'link_layer:.*Ethernet' /tmp/devinfo"
check "ibv_devinfo -v: active MTU 1024 on a 1500-byte netdev, max 4096" bash -c "grep -q 'max_mtu:.*4096' /tmp/devinfo && grep -q 'active_mtu:.*1024' /tmp/devinfo"
check "ibv_devinfo -v: a RoCE v2 GID for 198.18.0.1" bash -c "grep -E 'GID\[ *[0-9]+\]:.*::ffff:198.18.0.1, RoCE v2' /tmp/devinfo"
check "ibv_devinfo -v: device limits (max_qp, max_cqe, atomic_cap)" bash -c "grep -q 'max_qp:.*16384' /tmp/devinfo && grep -q 'max_cqe:.*65535' /tmp/devinfo && grep -q 'atomic_cap:.*ATOMIC_HCA' /tmp/devinfo"

py() { python3 - "$@"; }
check "pyverbs: open context, alloc PD, create and destroy CQs of several sizes" py <<'PY'
import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.cq import CQ, CompChannel
ctx = d.Context(name='mrc0')
pd = PD(ctx)
for n in (1, 16, 4096, 65535):
    cq = CQ(ctx, n)
    assert cq.cqe >= n, (n, cq.cqe)
    cq.close()
ch = CompChannel(ctx)
cq = CQ(ctx, 8, None, ch, 0)
cq.req_notify()
assert cq.poll(4) == (0, []), "a fresh CQ is empty"
cq.close(); ch.close(); pd.close(); ctx.close()
PY
check "pyverbs: a CQ larger than max_cqe fails with EINVAL" py <<'PY'
import errno
import pyverbs.device as d
from pyverbs.cq import CQ
from pyverbs.pyverbs_error import PyverbsRDMAError
ctx = d.Context(name='mrc0')
try:
    CQ(ctx, 1 << 20)
except PyverbsRDMAError as e:
    assert e.error_code == errno.EINVAL, e
else:
    raise SystemExit("CQ of 2^20 entries was accepted")
PY
check "rdma resource shows the PD and CQ while a context holds them" py <<'PY'
import subprocess
import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.cq import CQ
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 32)
out = subprocess.run(['rdma', 'resource', 'show', 'cq', 'dev', 'mrc0'], capture_output=True, text=True).stdout
assert 'cqe 32' in out, out
PY
check "a process exiting with objects open releases them (rmmod succeeds later)" py <<'PY'
import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.cq import CQ
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 32)
import os; os._exit(0)
PY
check "pyverbs: RC QP RESET->INIT->RTR->RTS with the peer's address; query_qp reports the attributes" py <<'PY'
import pyverbs.device as d, pyverbs.enums as e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPInitAttr, QPCap, QPAttr
from pyverbs.addr import AHAttr, GlobalRoute
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 16)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
assert qp.qp_num > 1
# the GID index of 198.18.0.1 (RoCE v2)
gid_index = next(i for i in range(64) if str(ctx.query_gid(1, i)) == '0000:0000:0000:0000:0000:ffff:c612:0001'
                 and ctx.query_gid_type(1, i) == e.IBV_GID_TYPE_ROCE_V2)
a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
gr = GlobalRoute(dgid=d.GID('::ffff:198.18.0.2'), sgid_index=gid_index)
a = QPAttr(qp_state=e.IBV_QPS_RTR, path_mtu=e.IBV_MTU_1024, dest_qp_num=0x1234, rq_psn=0x111,
           max_dest_rd_atomic=4, min_rnr_timer=12)
a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
          | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
a = QPAttr(qp_state=e.IBV_QPS_RTS, sq_psn=0x222, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=4)
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
          | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
attr, init = qp.query(e.IBV_QP_STATE | e.IBV_QP_DEST_QPN | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN | e.IBV_QP_CAP)
assert attr.qp_state == e.IBV_QPS_RTS, attr.qp_state
assert (attr.dest_qp_num, attr.sq_psn, attr.rq_psn) == (0x1234, 0x222, 0x111), (attr.dest_qp_num, attr.sq_psn, attr.rq_psn)
assert attr.cap.max_send_wr == 8 and init.cap.max_recv_wr == 8
qp.close(); cq.close(); pd.close(); ctx.close()
PY
check "pyverbs: illegal transitions and bad QP attributes fail with EINVAL" py <<'PY'
import errno
import pyverbs.device as d, pyverbs.enums as e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPInitAttr, QPCap, QPAttr
from pyverbs.pyverbs_error import PyverbsRDMAError
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 16)
def expect_einval(f):
    try:
        f()
    except PyverbsRDMAError as x:
        assert x.error_code == errno.EINVAL, x
    else:
        raise SystemExit("accepted: %r" % f)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
expect_einval(lambda: qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE))
a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=9)
expect_einval(lambda: qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS))
expect_einval(lambda: QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=1 << 20))))
expect_einval(lambda: QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_recv_sge=64))))
ud = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1); a.qkey = 0x11111111
ud.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
assert ud.query(e.IBV_QP_QKEY)[0].qkey == 0x11111111
assert ud.qp_num != qp.qp_num
PY
check "rmmod with links, after all user contexts closed" rmmod rdma_metaroce
ktap_finish
