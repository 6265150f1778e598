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
mrc_insmod
mk_hosts
A rdma link add mrc0 type metaroce netdev veth0
B rdma link add fabric7 type metaroce netdev veth1

# mrc0's RoCE v2 GID of 198.18.0.1, for the pyverbs snippets that address the peer.
wait_for 10 gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001
GID_A=$(gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001)
check "ibv_devices lists mrc0" bash -c "ibv_devices | grep -qw mrc0"
check "the provider matches any link name (fabric7), by the parent's modalias" bash -c "ibv_devices | grep -qw fabric7 && grep -qx platform:rdma_metaroce /sys/class/infiniband/fabric7/device/modalias"
check "ibv_devinfo -v: port 1 PORT_ACTIVE, link layer Ethernet" bash -c "ibv_devinfo -v -d mrc0 > /tmp/devinfo && grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo && grep -q 'link_layer:.*Ethernet' /tmp/devinfo"
check "ibv_devinfo -v: active MTU 1024 on a 1500-byte netdev, max 4096" bash -c "grep -q 'max_mtu:.*4096' /tmp/devinfo && grep -q 'active_mtu:.*1024' /tmp/devinfo"
check "ibv_devinfo -v: a RoCE v2 GID for 198.18.0.1" bash -c "grep -E 'GID\[ *[0-9]+\]:.*::ffff:198.18.0.1, RoCE v2' /tmp/devinfo"
check "ibv_devinfo -v: device limits (max_qp, max_cqe, atomic_cap)" bash -c "grep -q 'max_qp:.*16382' /tmp/devinfo && grep -q 'max_cqe:.*65535' /tmp/devinfo && grep -q 'atomic_cap:.*ATOMIC_HCA' /tmp/devinfo"
check "ibv_devinfo -v: memory windows (max_mw, MEM_WINDOW, MEM_WINDOW_TYPE_2B)" bash -c "grep -q 'max_mw:.*65535' /tmp/devinfo && grep -qw 'MEM_WINDOW' /tmp/devinfo && grep -q 'MEM_WINDOW_TYPE_2B' /tmp/devinfo"
check "ibv_devinfo -v: on-demand paging (ODP_SUPPORT; RC send, receive, write, read, atomics)" bash -c "grep -qw 'ODP_SUPPORT' /tmp/devinfo && awk '/rc_odp_caps:/ {f = 1; next} /:/ {f = 0} f' /tmp/devinfo | tr -s ' \t\n' ' ' | grep -q 'SUPPORT_SEND SUPPORT_RECV SUPPORT_WRITE SUPPORT_READ SUPPORT_ATOMIC'"

py() { PYTHONPATH=$HERE/../lib python3 - "$@"; }
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
# Spec MR-7.5.1: QP numbers are not reused quickly (late packets of a destroyed QP
# must not reach the next one); the driver hands its slots out in turn.
check "a QP number freed is not handed out again by the next creations (MR-7.5.1)" py <<'PY'
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPInitAttr, QPCap
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 8)
attr = lambda: QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=1, max_recv_wr=1))
seen = []
for _ in range(64):
    qp = QP(pd, attr())
    seen.append(qp.qp_num)
    qp.close()
assert len(set(seen)) == len(seen), f"a QP number came back within 64 creations: {seen}"
PY
check "pyverbs: RC QP RESET->INIT->RTR->RTS with the peer's address; query_qp reports the attributes" py "$GID_A" <<'PY'
import sys
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPInitAttr, QPCap, QPAttr
from qp_setup import modify_to_init, rtr_attr, RTR_MASK, PEER_QPN, RQ_PSN
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 16)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
assert qp.qp_num > 1
gid_index = int(sys.argv[1])  # mrc0's RoCE v2 GID of 198.18.0.1
modify_to_init(qp, e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE)
qp.modify(rtr_attr(gid_index, 4), RTR_MASK)
a = QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_RTR)
a.sq_psn = 0x222; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 4
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
          | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
attr, init = qp.query(e.IBV_QP_STATE | e.IBV_QP_DEST_QPN | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN | e.IBV_QP_CAP)
assert attr.qp_state == e.IBV_QPS_RTS, attr.qp_state
assert (attr.dest_qp_num, attr.sq_psn, attr.rq_psn) == (PEER_QPN, 0x222, RQ_PSN), (attr.dest_qp_num, attr.sq_psn, attr.rq_psn)
assert attr.cap.max_send_wr == 8 and init.cap.max_recv_wr == 8, (attr.cap.max_send_wr, init.cap.max_recv_wr)
qp.close(); cq.close(); pd.close(); ctx.close()
PY
check "pyverbs: illegal transitions and bad QP attributes fail with EINVAL" py <<'PY'
import errno
import pyverbs.device as d
from pyverbs_compat import e
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
a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
a.qkey = 0x11111111
ud.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
assert ud.query(e.IBV_QP_QKEY)[0].qkey == 0x11111111
assert ud.qp_num != qp.qp_num
PY
check "pyverbs: max_qp_rd_atom is the 32 READs the transport keeps outstanding; 33 is refused with EINVAL" py "$GID_A" <<'PY'
import sys
import errno
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPInitAttr, QPCap
from pyverbs.pyverbs_error import PyverbsRDMAError
from qp_setup import modify_to_init, rtr_attr, RTR_MASK
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 16)
da = ctx.query_device()
assert (da.max_qp_rd_atom, da.max_qp_init_rd_atom) == (32, 32), (da.max_qp_rd_atom, da.max_qp_init_rd_atom)
gid_index = int(sys.argv[1])  # mrc0's RoCE v2 GID of 198.18.0.1
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
modify_to_init(qp, e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE)
for rd, ok in ((33, False), (32, True)):
    try:
        qp.modify(rtr_attr(gid_index, rd), RTR_MASK)
    except PyverbsRDMAError as x:
        assert not ok and x.error_code == errno.EINVAL, (rd, x)
    else:
        assert ok, "max_dest_rd_atomic %d accepted" % rd
assert qp.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_RTR
qp.close(); cq.close(); pd.close(); ctx.close()
PY
check "pyverbs: register user memory MRs; keys are unique and carry the access rights" py <<'PY'
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.mr import MR
ctx = d.Context(name='mrc0'); pd = PD(ctx)
rw = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
mrs = [MR(pd, 4096 * (i + 1), rw if i % 2 else e.IBV_ACCESS_LOCAL_WRITE) for i in range(8)]
keys = {m.lkey for m in mrs}
assert len(keys) == 8, keys
assert all(m.lkey == m.rkey for m in mrs)
m = mrs[3]; m.write(b'metaroce', 8); assert m.read(8, 0) == b'metaroce'
big = MR(pd, 8 << 20, rw)          # 8 MiB pinned
for m in mrs + [big]:
    m.close()
pd.close(); ctx.close()
PY
check "pyverbs: remote write without local write fails with EINVAL" py <<'PY'
import errno
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
ctx = d.Context(name='mrc0'); pd = PD(ctx)
try:
    MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
except PyverbsRDMAError as x:
    assert x.error_code == errno.EINVAL, x
else:
    raise SystemExit("accepted")
PY
check "pyverbs: address handles need a GRH (EINVAL without); one to 198.18.0.2 is created" py "$GID_A" <<'PY'
import sys
import errno
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.addr import AH, AHAttr
from pyverbs.pyverbs_error import PyverbsRDMAError
from qp_setup import peer_ah_attr
ctx = d.Context(name='mrc0'); pd = PD(ctx)
gid_index = int(sys.argv[1])  # mrc0's RoCE v2 GID of 198.18.0.1
ah = AH(pd, attr=peer_ah_attr(gid_index))
ah.close()
try:
    AH(pd, attr=AHAttr(is_global=0, port_num=1))
except PyverbsRDMAError as x:
    assert x.error_code == errno.EINVAL, x
else:
    raise SystemExit("AH without GRH accepted")
PY
check "pyverbs: SRQ create/query/modify limit and size; oversize EINVAL; an RC QP attaches to it" py <<'PY'
import errno
import pyverbs.device as d
from pyverbs_compat import e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.srq import SRQ, SrqInitAttr, SrqAttr
from pyverbs.qp import QP, QPInitAttr, QPCap
from pyverbs.pyverbs_error import PyverbsRDMAError
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 16)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=64, max_sge=2)))
a = srq.query()
assert (a.max_wr, a.max_sge) == (64, 2), (a.max_wr, a.max_sge)
srq.modify(SrqAttr(srq_limit=16), e.IBV_SRQ_LIMIT)
assert srq.query().srq_limit == 16
def expect(code, f):
    try:
        f()
    except PyverbsRDMAError as x:
        assert x.error_code == code, x
    else:
        raise SystemExit("accepted")
expect(errno.EINVAL, lambda: srq.modify(SrqAttr(srq_limit=65), e.IBV_SRQ_LIMIT))
assert ctx.query_device().device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE
expect(errno.EINVAL, lambda: srq.modify(SrqAttr(max_wr=8), e.IBV_SRQ_MAX_WR))  # below the limit
srq.modify(SrqAttr(max_wr=128), e.IBV_SRQ_MAX_WR)
assert srq.query().max_wr == 128, srq.query().max_wr
expect(errno.EINVAL, lambda: srq.modify(SrqAttr(max_wr=1 << 20), e.IBV_SRQ_MAX_WR))
expect(errno.EINVAL, lambda: SRQ(pd, SrqInitAttr(SrqAttr(max_wr=1 << 20, max_sge=1))))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
qp.close(); srq.close()
PY
check "rmmod with links, after all user contexts closed" rmmod rdma_metaroce
ktap_finish
