# SPDX-License-Identifier: GPL-2.0
"""Kernel memory per idle connected RC QP, for `make bench` (bench.sh).

   qpmem.py DEV-A GID-INDEX-A DEV-B GID-INDEX-B PAIRS

Opens both devices, makes one PD and one CQ per side, reads /proc/meminfo, then
creates PAIRS RC QPs on each device and connects each A QP to its B QP (RESET ->
INIT -> RTR -> RTS; nothing is posted), waits for the kernel to settle and reads
/proc/meminfo again. Prints one line `qpmem QPS SLAB_KB VMALLOC_KB PERCPU_KB
MEMFREE_KB` with the deltas over all 2*PAIRS QPs (MemFree's delta also counts the
process's own allocations, e.g. a provider's user-space queues). Every QP uses the
same small capabilities, so the figures compare transports, not queue sizes."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
import pyverbs.device as d  # noqa: E402
from pyverbs.addr import AHAttr, GlobalRoute  # noqa: E402
from pyverbs.cq import CQ  # noqa: E402
from pyverbs.pd import PD  # noqa: E402
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr  # noqa: E402
from pyverbs_compat import e  # noqa: E402

CAP = dict(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1, max_inline_data=0)
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def meminfo():
    m = {}
    for line in open('/proc/meminfo'):
        k, v = line.split(':', 1)
        m[k] = int(v.split()[0])
    return m


class Side:
    def __init__(self, name, gid_index):
        self.ctx = d.Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(1, gid_index)
        self.qps = []

    def new_qp(self):
        qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                    cap=QPCap(**CAP), sq_sig_all=0))
        self.qps.append(qp)
        return qp


def connect(side, qp, peer, peer_qp):
    a = QPAttr(path_mtu=e.IBV_MTU_1024)
    a.qp_access_flags = ACCESS
    a.dest_qp_num = peer_qp.qp_num
    a.sq_psn = 0
    a.rq_psn = 0
    a.max_dest_rd_atomic = 1
    a.max_rd_atomic = 1
    a.min_rnr_timer = 12
    a.timeout = 14
    a.retry_cnt = 7
    a.rnr_retry = 7
    gr = GlobalRoute(dgid=peer.gid, sgid_index=side.gid_index, hop_limit=64)
    a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
    qp.to_rts(a)


def main():
    dev_a, ga, dev_b, gb, pairs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    a, b = Side(dev_a, ga), Side(dev_b, gb)
    time.sleep(1)
    before = meminfo()
    t0 = time.monotonic()
    for _ in range(pairs):
        qa, qb = a.new_qp(), b.new_qp()
        connect(a, qa, b, qb)
        connect(b, qb, a, qa)
    took = time.monotonic() - t0
    time.sleep(2)
    after = meminfo()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in ('Slab', 'VmallocUsed', 'Percpu', 'MemFree')}
    print('qpmem %d %d %d %d %d %.1f' % (2 * pairs, delta['Slab'], delta['VmallocUsed'], delta['Percpu'],
                                         -delta['MemFree'], took))
    sys.stdout.flush()


if __name__ == '__main__':
    main()
