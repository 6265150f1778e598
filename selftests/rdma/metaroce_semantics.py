# SPDX-License-Identifier: GPL-2.0
"""Verbs semantics over MetaRoCE, checked through pyverbs: one process drives an RC
QP on each of two devices (mrc0 in hostA, mrc1 in hostB; packets cross the veth
pair) and prints TAP lines. Usage: metaroce_semantics.py GID-INDEX-A GID-INDEX-B"""
import errno
import subprocess
import sys
import time

import pyverbs.device as d
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mem_alloc import MAP_ANONYMOUS_, MAP_PRIVATE_, madvise, mmap, munmap
from pyverbs.mr import MR, MW, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR
from pyverbs_compat import e

GA, GB = int(sys.argv[1]), int(sys.argv[2])
N = 0
FAILED = 0


def tap(ok, desc, why=''):
    global N, FAILED
    N += 1
    if not ok:
        FAILED += 1
    print(('ok' if ok else 'not ok'), N, desc)
    if why and not ok:
        print('#  ', show(why))
    sys.stdout.flush()


def show(x):
    """Completions as their fields, for failure reports."""
    if isinstance(x, list):
        return '; '.join(show(w) for w in x) or 'no completion'
    if hasattr(x, 'wr_id') and hasattr(x, 'status'):
        return ('wr_id=%d status=%d opcode=%d len=%d imm=%#x flags=%#x qp=%#x'
                % (x.wr_id, x.status, x.opcode, x.byte_len, x.imm_data, x.wc_flags, x.qp_num))
    return str(x)


ALL = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
       e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)


class End:
    def __init__(self, name, gid_index, qp_type=e.IBV_QPT_RC):
        self.ctx = d.Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2,
                    max_inline_data=64)
        self.qp = QP(self.pd, QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq,
                                          cap=cap, sq_sig_all=0))
        self.mr = MR(self.pd, 4096, ALL)
        # A region the peer may read but not write.
        self.ro = MR(self.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(1, gid_index)
        self.psn = 0x123 if name == 'mrc0' else 0x456

    def connect(self, peer):
        a = QPAttr(path_mtu=e.IBV_MTU_1024)
        a.qp_access_flags = ALL
        a.dest_qp_num = peer.qp.qp_num
        # Each end sends from its own PSN; the peer expects exactly that.
        a.sq_psn = self.psn
        a.rq_psn = peer.psn
        a.max_dest_rd_atomic = 4
        a.max_rd_atomic = 4
        a.min_rnr_timer = 1
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        gr = GlobalRoute(dgid=peer.gid, sgid_index=self.gid_index, hop_limit=64)
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        self.qp.to_rts(a)

    def poll(self, n=1, timeout=10.0):
        got = []
        end = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < end:
            k, wcs = self.cq.poll(n - len(got))
            got += wcs[:k]
        return got


def sge(mr, off, length):
    return SGE(mr.buf + off, length, mr.lkey)


def counter(dev, name):
    out = subprocess.run(['rdma', 'statistic', 'show', 'link', dev + '/1'],
                         capture_output=True, text=True).stdout.split()
    return int(out[out.index(name) + 1])


a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)

# SEND with immediate data: the receiver gets the bytes, the length and the value.
b.mr.write(b'\0' * 64, 64, 0)
b.qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[sge(b.mr, 0, 64)]))
a.mr.write(b'hello, metaroce!', 16, 0)
a.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1, imm_data=0x12345678,
                      sg=[sge(a.mr, 0, 16)], send_flags=e.IBV_SEND_SIGNALED))
sc, rc = a.poll(), b.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and sc[0].wr_id == 1
    and sc[0].opcode == e.IBV_WC_SEND, 'SEND_WITH_IMM completes at the sender', sc)
tap(len(rc) == 1 and rc[0].wr_id == 7 and rc[0].byte_len == 16 and rc[0].opcode == e.IBV_WC_RECV
    and rc[0].wc_flags & e.IBV_WC_WITH_IMM and rc[0].imm_data == 0x12345678
    and rc[0].qp_num == b.qp.qp_num and b.mr.read(16, 0) == b'hello, metaroce!',
    'the receiver gets the data, its length, the immediate value and its QP number', rc)

# Two SGEs on each side, unsignaled then signaled: one send completion only.
b.qp.post_recv(RecvWR(wr_id=8, num_sge=2, sg=[sge(b.mr, 100, 5), sge(b.mr, 200, 100)]))
a.mr.write(b'0123456789', 10, 32)
a.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=2,
                      sg=[sge(a.mr, 32, 3), sge(a.mr, 35, 7)], send_flags=0))
b.qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[sge(b.mr, 400, 16)]))
a.qp.post_send(SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge(a.mr, 0, 4)],
                      send_flags=e.IBV_SEND_SIGNALED))
sc, rc = a.poll(2, 5.0), b.poll(2)
tap([w.wr_id for w in sc] == [3], 'an unsignaled SEND produces no completion, the next signaled one does', sc)
tap([w.wr_id for w in rc] == [8, 9] and b.mr.read(5, 100) == b'01234' and b.mr.read(5, 200) == b'56789',
    'scatter/gather on both sides places the bytes in order', rc)

# Inline data: copied at post time, so the buffer may change right after.
b.qp.post_recv(RecvWR(wr_id=10, num_sge=1, sg=[sge(b.mr, 500, 32)]))
a.mr.write(b'inline-bytes', 12, 64)
a.qp.post_send(SendWR(wr_id=4, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge(a.mr, 64, 12)],
                      send_flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
a.mr.write(b'XXXXXXXXXXXX', 12, 64)
sc, rc = a.poll(), b.poll()
tap(len(rc) == 1 and b.mr.read(12, 500) == b'inline-bytes', 'inline data is taken when posted', rc)

# RDMA WRITE with immediate, RDMA READ, atomics.
b.qp.post_recv(RecvWR(wr_id=11, num_sge=1, sg=[sge(b.mr, 600, 8)]))
a.mr.write(b'W' * 100, 100, 1000)
w = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=0xabcdef,
           sg=[sge(a.mr, 1000, 100)], send_flags=e.IBV_SEND_SIGNALED)
w.set_wr_rdma(b.mr.rkey, b.mr.buf + 2000)
a.qp.post_send(w)
sc, rc = a.poll(), b.poll()
tap(len(rc) == 1 and rc[0].opcode == e.IBV_WC_RECV_RDMA_WITH_IMM and rc[0].imm_data == 0xabcdef
    and b.mr.read(100, 2000) == b'W' * 100, 'RDMA WRITE_WITH_IMM places data and consumes a receive', rc)

# NCCL's IB transport: its receives have no scatter list (the data comes by RDMA
# WRITE WITH IMMEDIATE, to the writer's address), one of its writes carries no data
# (the immediate alone), and its regions ask for relaxed ordering (an optional
# access flag, which a device without it ignores).
nccl = MR(b.pd, 4096, ALL | e.IBV_ACCESS_RELAXED_ORDERING)
for wr_id in (90, 91):
    b.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=0))
a.mr.write(b'N' * 200, 200, 1200)
w = SendWR(wr_id=92, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=0x11,
           sg=[sge(a.mr, 1200, 200)], send_flags=e.IBV_SEND_SIGNALED)
w.set_wr_rdma(nccl.rkey, nccl.buf + 100)
a.qp.post_send(w)
# (pyverbs builds a SendWR with at least one SGE; the list is then cut to none.)
w = SendWR(wr_id=93, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=0x22,
           sg=[sge(a.mr, 0, 0)], send_flags=e.IBV_SEND_SIGNALED)
w.num_sge = 0
w.set_wr_rdma(nccl.rkey, nccl.buf)
a.qp.post_send(w)
sc, rc = a.poll(2), b.poll(2)
tap([(w.wr_id, w.status) for w in sc] == [(92, e.IBV_WC_SUCCESS), (93, e.IBV_WC_SUCCESS)]
    and [(w.wr_id, w.opcode, w.imm_data, w.byte_len) for w in rc]
    == [(90, e.IBV_WC_RECV_RDMA_WITH_IMM, 0x11, 200), (91, e.IBV_WC_RECV_RDMA_WITH_IMM, 0x22, 0)]
    and nccl.read(200, 100) == b'N' * 200,
    "NCCL's pattern: receives without SGEs, WRITE_WITH_IMM with and without data, "
    'a relaxed-ordering region', (sc, rc))
nccl.close()
# NCCL asks for enhanced connection establishment and goes on without it when the
# device answers EOPNOTSUPP (any other error fails its connection).
try:
    a.qp.query_ece()
    tap(False, 'ibv_query_ece: EOPNOTSUPP')
except PyverbsRDMAError as x:
    tap(x.error_code == errno.EOPNOTSUPP, 'ibv_query_ece: EOPNOTSUPP', x)
def to_b(wr_id, opcode, off, length, remote_off):
    """A signaled WR of a's naming `length` bytes at `off` of a's MR and
    `remote_off` of b's."""
    w = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge(a.mr, off, length)],
               send_flags=e.IBV_SEND_SIGNALED)
    w.set_wr_rdma(b.mr.rkey, b.mr.buf + remote_off)
    return w


b.mr.write(b'R' * 300, 300, 3000)
a.qp.post_send(to_b(6, e.IBV_WR_RDMA_READ, 3000, 300, 3000))
sc = a.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and sc[0].opcode == e.IBV_WC_RDMA_READ
    and a.mr.read(300, 3000) == b'R' * 300, 'RDMA READ returns the remote bytes', sc)
b.mr.write((40).to_bytes(8, 'little'), 8, 8)
f = SendWR(wr_id=12, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[sge(a.mr, 16, 8)],
           send_flags=e.IBV_SEND_SIGNALED)
f.set_wr_atomic(b.mr.rkey, b.mr.buf + 8, 2)
a.qp.post_send(f)
c = SendWR(wr_id=13, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1, sg=[sge(a.mr, 24, 8)],
           send_flags=e.IBV_SEND_SIGNALED)
c.set_wr_atomic(b.mr.rkey, b.mr.buf + 8, 42, 7)
a.qp.post_send(c)
sc = a.poll(2)
tap(len(sc) == 2 and all(w.status == e.IBV_WC_SUCCESS for w in sc)
    and int.from_bytes(a.mr.read(8, 16), 'little') == 40
    and int.from_bytes(a.mr.read(8, 24), 'little') == 42
    and int.from_bytes(b.mr.read(8, 8), 'little') == 7,
    'FETCH_AND_ADD then CMP_AND_SWP return the old values and update memory', sc)

# ATOMIC WRITE (MR-4.4.6): 8 bytes stored as one unit; the operand comes from an
# SGE here (the ibv_wr_atomic_write path, with the bytes in the WQE, is rdma-core's
# test_qp_ex_rc_atomic_write).
a.mr.write(b'ATOMICWR', 8, 48)
a.qp.post_send(to_b(20, e.IBV_WR_ATOMIC_WRITE, 48, 8, 64))
sc = a.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and sc[0].opcode == e.IBV_WC_ATOMIC_WRITE
    and sc[0].byte_len == 8 and b.mr.read(8, 64) == b'ATOMICWR',
    'ATOMIC_WRITE stores its 8 bytes and completes as IBV_WC_ATOMIC_WRITE', sc)
for what, va, n in (('a misaligned address', 68, 8), ('4 bytes', 64, 4)):
    try:
        a.qp.post_send(to_b(21, e.IBV_WR_ATOMIC_WRITE, 48, n, va))
        tap(False, 'ATOMIC_WRITE of %s: EINVAL when posted' % what)
    except PyverbsRDMAError as x:
        tap(x.error_code == errno.EINVAL, 'ATOMIC_WRITE of %s: EINVAL when posted' % what, x)

# Bad arguments: errno from the post, no completion.
try:
    a.qp.post_send(SendWR(wr_id=14, opcode=e.IBV_WR_SEND, num_sge=3,
                          sg=[sge(a.mr, 0, 1)] * 3, send_flags=e.IBV_SEND_SIGNALED))
    tap(False, 'more SGEs than max_send_sge: EINVAL')
except PyverbsRDMAError as x:
    tap(x.error_code == errno.EINVAL, 'more SGEs than max_send_sge: EINVAL', x)

# A local key that names nothing: local protection error at the sender.
bad = SendWR(wr_id=15, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
             sg=[SGE(a.mr.buf, 8, a.mr.lkey ^ 0x100)], send_flags=e.IBV_SEND_SIGNALED)
bad.set_wr_rdma(b.mr.rkey, b.mr.buf)
a.qp.post_send(bad)
sc = a.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_LOC_PROT_ERR, 'a bad lkey completes with LOC_PROT_ERR', sc)

# Fresh pair for the remote access error (the first error moved a's QP to ERR).
a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)
before = counter('mrc1', 'access_errors')
w = SendWR(wr_id=16, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge(a.mr, 0, 8)],
           send_flags=e.IBV_SEND_SIGNALED)
w.set_wr_rdma(b.ro.rkey, b.ro.buf)
a.qp.post_send(w)
after_err = SendWR(wr_id=17, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge(a.mr, 0, 8)],
                   send_flags=e.IBV_SEND_SIGNALED)
a.qp.post_send(after_err)
sc = a.poll(2)
tap(len(sc) >= 1 and sc[0].wr_id == 16 and sc[0].status == e.IBV_WC_REM_ACCESS_ERR,
    'WRITE to a region without remote write: REM_ACCESS_ERR (the responder NAKs)', sc)
tap(len(sc) == 2 and sc[1].status == e.IBV_WC_WR_FLUSH_ERR, 'later work is flushed', sc)
tap(counter('mrc1', 'access_errors') > before, 'the responder counts the access error')
# An access violation is fatal to the responder's QP too (as in IBA): its own
# posted work is flushed.
b.qp.post_recv(RecvWR(wr_id=19, num_sge=1, sg=[sge(b.mr, 0, 8)]))
rc = b.poll()
tap(len(rc) == 1 and rc[0].status == e.IBV_WC_WR_FLUSH_ERR, "the responder's QP is in error: its receives are flushed", rc)

# A READ naming an rkey that does not exist, on a fresh pair.
a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)
r = SendWR(wr_id=18, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[sge(b.mr, 0, 8)],
           send_flags=e.IBV_SEND_SIGNALED)
r.set_wr_rdma(a.mr.rkey + 0x100, a.mr.buf)
b.qp.post_send(r)
sc = b.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_REM_ACCESS_ERR, 'READ with an unknown rkey: REM_ACCESS_ERR', sc)

# Posting and polling go through queues mapped into the process, not through the
# kernel: the module counts every data-path uverbs command a process issues
# (cmd_posts, cmd_polls) and every send doorbell.
def cmds(dev):
    return {k: counter(dev, k) for k in ('cmd_posts', 'cmd_polls', 'doorbells')}


a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)
a0, b0 = cmds('mrc0'), cmds('mrc1')
for i in range(16):
    b.qp.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[sge(b.mr, 64 * i, 64)]))
empty = [b.cq.poll(1)[0] for _ in range(16)]
for i in range(16):
    a.mr.write(bytes([i]) * 8, 8, 8 * i)
    a.qp.post_send(SendWR(wr_id=200 + i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge(a.mr, 8 * i, 8)],
                          send_flags=e.IBV_SEND_SIGNALED))
sc, rc = a.poll(16), b.poll(16)
a1, b1 = cmds('mrc0'), cmds('mrc1')
tap(b1 == b0 and empty == [0] * 16,
    'posting 16 receives and polling the CQ (empty, then 16 completions) takes no command', (b0, b1))
tap(a1['doorbells'] - a0['doorbells'] == 16 and a1['cmd_posts'] == a0['cmd_posts']
    and a1['cmd_polls'] == a0['cmd_polls'],
    'each ibv_post_send call rings one doorbell; no post or poll command', (a0, a1))
tap([w.wr_id for w in sc] == list(range(200, 216)) and all(w.status == e.IBV_WC_SUCCESS for w in sc)
    and [w.wr_id for w in rc] == list(range(100, 116))
    and all(b.mr.read(8, 64 * i) == bytes([i]) * 8 for i in range(16)),
    'the 16 messages posted through the rings arrive in order, intact', sc + rc)

# Resizing a CQ (ibv_resize_cq): completions not yet polled move to the new ring,
# in order; the provider maps the new ring and polls it without a command.
a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)


def send_to_b(first, count):
    for i in range(first, first + count):
        b.qp.post_recv(RecvWR(wr_id=300 + i, num_sge=1, sg=[sge(b.mr, 64 * i, 64)]))
    for i in range(first, first + count):
        a.mr.write(bytes([0x40 + i]) * 16, 16, 16 * i)
        a.qp.post_send(SendWR(wr_id=400 + i, opcode=e.IBV_WR_SEND, num_sge=1,
                              sg=[sge(a.mr, 16 * i, 16)], send_flags=e.IBV_SEND_SIGNALED))
    # The receiver completes a message before it acknowledges it: once a's sends
    # have completed, b's receive completions are in b's CQ.
    return a.poll(count)


def resize(cq, n):
    try:
        cq.resize(n)
        return 0
    except PyverbsRDMAError as x:
        return x.error_code


sc = send_to_b(0, 4)
tap(len(sc) == 4 and resize(b.cq, 3) == errno.EINVAL,
    'resizing a CQ below the completions waiting in it: EINVAL', sc)
b0 = cmds('mrc1')
tap(resize(b.cq, 8) == 0 and b.cq.cqe >= 8, 'resizing a CQ holding 4 completions to 8', b.cq.cqe)
sc = send_to_b(4, 4)
rc = b.poll(8)
tap(len(sc) == 4 and [w.wr_id for w in rc] == list(range(300, 308))
    and all(w.status == e.IBV_WC_SUCCESS and w.byte_len == 16 for w in rc)
    and all(b.mr.read(16, 64 * i) == bytes([0x40 + i]) * 16 for i in range(8)),
    'the 4 completions from before the resize and 4 after come out in order, the CQ full', rc)
tap(cmds('mrc1')['cmd_polls'] == b0['cmd_polls'], 'the resized CQ is polled through its new ring')
tap(resize(b.cq, 1) == 0 and b.cq.cqe >= 1 and len(send_to_b(8, 1)) == 1
    and [w.wr_id for w in b.poll(1)] == [308], 'an empty CQ shrinks to one entry and still completes')
tap(resize(b.cq, 1 << 20) == errno.EINVAL, 'resizing beyond max_cqe: EINVAL')

# Memory windows (MR-9.2.4): a type 2 window bound on b's QP gives a remote peer
# its own range of a region with its own rights, through that QP only; the
# region cannot be deregistered while it is bound; LOCAL_INV unbinds it.
class SecondQp(End):
    """Another RC QP in `first`'s context, PD and CQ."""
    def __init__(self, first):
        self.ctx, self.pd, self.cq, self.mr = first.ctx, first.pd, first.cq, first.mr
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                          cap=cap, sq_sig_all=0))
        self.gid_index, self.gid, self.psn = first.gid_index, first.gid, first.psn + 0x1000


def bind_on(end, wr_id, mw, mr, off, length, access):
    w = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW)
    w.set_bind_wr(mw, MWBindInfo(mr, mr.buf + off, length, access))
    end.qp.post_send(w)
    return end.poll()


def write_via(src, wr_id, rkey, va, data):
    src.mr.write(data, len(data), 0)
    w = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge(src.mr, 0, len(data))],
               send_flags=e.IBV_SEND_SIGNALED)
    w.set_wr_rdma(rkey, va)
    src.qp.post_send(w)
    return src.poll()


a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)
a2, b2 = End('mrc0', GA), SecondQp(b)
a2.connect(b2)
b2.connect(a2)
region = MR(b.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
mw = MW(b.pd, e.IBV_MW_TYPE_2)
first_key = mw.rkey
rc = bind_on(b, 40, mw, region, 1024, 512, e.IBV_ACCESS_REMOTE_WRITE)
tap(len(rc) == 1 and rc[0].status == e.IBV_WC_SUCCESS and rc[0].opcode == e.IBV_WC_BIND_MW
    and mw.rkey != first_key and mw.rkey >> 8 == first_key >> 8,
    'a type 2 window binds under a new key (IBV_WC_BIND_MW)', rc)
sc = write_via(a, 41, mw.rkey, region.buf + 1024 + 448, b'window!!' * 8)
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and region.read(64, 1024 + 448) == b'window!!' * 8,
    "an RDMA WRITE through the window lands in its region (which grants no remote right itself)", sc)
try:
    region.close()
    tap(False, 'deregistering a region with a window bound: EBUSY')
except PyverbsRDMAError as x:
    tap(x.error_code == errno.EBUSY, 'deregistering a region with a window bound: EBUSY', x)
sc = write_via(a2, 42, mw.rkey, region.buf + 1024, b'other-qp')
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_REM_ACCESS_ERR and region.read(8, 1024) != b'other-qp',
    'the same key through another QP of the PD: REM_ACCESS_ERR, nothing written', sc)
inv = SendWR(wr_id=43, opcode=e.IBV_WR_LOCAL_INV)
inv.imm_data = mw.rkey
b.qp.post_send(inv)
rc = b.poll()
tap(len(rc) == 1 and rc[0].status == e.IBV_WC_SUCCESS and rc[0].opcode == e.IBV_WC_LOCAL_INV,
    'LOCAL_INV unbinds the window', rc)
sc = write_via(a, 44, mw.rkey, region.buf + 1024, b'too-late')
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_REM_ACCESS_ERR and region.read(8, 1024) != b'too-late',
    'a WRITE through the invalidated window: REM_ACCESS_ERR, nothing written', sc)
mw.close()
try:
    region.close()
    tap(True, 'the region deregisters once its window is gone')
except PyverbsRDMAError as x:
    tap(False, 'the region deregisters once its window is gone', x)

# A bind the device refuses (the region lacks IBV_ACCESS_MW_BIND; one byte past
# a region) completes with MW_BIND_ERR and moves the QP to the error state.
for what, access, off in (('a region without MW_BIND access', e.IBV_ACCESS_LOCAL_WRITE, 0),
                          ('a range past the end of the region', e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND, 1)):
    a, b = End('mrc0', GA), End('mrc1', GB)
    a.connect(b)
    b.connect(a)
    mr = MR(b.pd, 4096, access)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    rc = bind_on(b, 45, mw, mr, off, 4096, e.IBV_ACCESS_REMOTE_READ)
    b.qp.post_recv(RecvWR(wr_id=46, num_sge=1, sg=[sge(b.mr, 0, 8)]))
    rc += b.poll()
    tap(len(rc) == 2 and rc[0].status == e.IBV_WC_MW_BIND_ERR and rc[1].status == e.IBV_WC_WR_FLUSH_ERR,
        'binding a window to %s: MW_BIND_ERR, the QP in error' % what, rc)
    mw.close()
    mr.close()

# UC QPs (MR-4.6): SENDs and WRITEs arrive; READs and atomics are refused when
# posted; a WRITE the responder cannot place is dropped and counted there, the
# requester completes it and both QPs go on.
a, b = End('mrc0', GA, e.IBV_QPT_UC), End('mrc1', GB, e.IBV_QPT_UC)
a.connect(b)
b.connect(a)
b.qp.post_recv(RecvWR(wr_id=50, num_sge=1, sg=[sge(b.mr, 0, 64)]))
a.mr.write(b'uc send!', 8, 0)
a.qp.post_send(SendWR(wr_id=51, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge(a.mr, 0, 8)],
                      send_flags=e.IBV_SEND_SIGNALED))
sc, rc = a.poll(), b.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and len(rc) == 1 and rc[0].byte_len == 8
    and b.mr.read(8, 0) == b'uc send!', 'a UC SEND arrives', sc + rc)
sc = write_via(a, 52, b.mr.rkey, b.mr.buf + 1024, b'uc write' * 4)
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and b.mr.read(32, 1024) == b'uc write' * 4,
    'a UC RDMA WRITE lands', sc)
for what, op in (('RDMA READ', e.IBV_WR_RDMA_READ), ('FETCH_AND_ADD', e.IBV_WR_ATOMIC_FETCH_AND_ADD)):
    try:
        w = SendWR(wr_id=53, opcode=op, num_sge=1, sg=[sge(a.mr, 0, 8)], send_flags=e.IBV_SEND_SIGNALED)
        if op == e.IBV_WR_RDMA_READ:
            w.set_wr_rdma(b.mr.rkey, b.mr.buf)
        else:
            w.set_wr_atomic(b.mr.rkey, b.mr.buf, 1)
        a.qp.post_send(w)
        tap(False, '%s on a UC QP: EINVAL when posted' % what)
    except PyverbsRDMAError as x:
        tap(x.error_code == errno.EINVAL, '%s on a UC QP: EINVAL when posted' % what, x)
before = counter('mrc1', 'uc_dropped')
sc = write_via(a, 54, b.ro.rkey, b.ro.buf, b'no right')
sc += write_via(a, 55, b.mr.rkey, b.mr.buf + 2048, b'and on!!')
tap([(w.wr_id, w.status) for w in sc] == [(54, e.IBV_WC_SUCCESS), (55, e.IBV_WC_SUCCESS)]
    and b.ro.read(8, 0) != b'no right' and b.mr.read(8, 2048) == b'and on!!'
    and counter('mrc1', 'uc_dropped') == before + 1,
    'a UC WRITE to a region without remote write is dropped (uc_dropped), the next one lands', sc)

# On-demand paging (MR-9.2.5): regions over anonymous memory registered with
# IBV_ACCESS_ON_DEMAND, their pages dropped (MADV_DONTNEED) before each use, so
# both devices meet absent pages, as requester and as responder, and bring them in.
PAGE = 4096
ODP = ALL | e.IBV_ACCESS_ON_DEMAND
a, b = End('mrc0', GA), End('mrc1', GB)
a.connect(b)
b.connect(a)
tap(all(x.ctx.query_device_ex().odp_caps.general_caps & e.IBV_ODP_SUPPORT for x in (a, b)),
    'the devices announce on-demand paging')
abuf = mmap(length=4 * PAGE, flags=MAP_ANONYMOUS_ | MAP_PRIVATE_)
bbuf = mmap(length=6 * PAGE, flags=MAP_ANONYMOUS_ | MAP_PRIVATE_)
amr = MR(a.pd, 4 * PAGE, ODP, address=abuf)
bmr = MR(b.pd, 6 * PAGE, ODP, address=bbuf)
faults0 = {d: (counter(d, 'odp_faults'), counter(d, 'odp_faults_served')) for d in ('mrc0', 'mrc1')}


def odp_op(wr_id, opcode, off, length, remote_off, mr=None):
    w = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(abuf + off, length, amr.lkey)],
               send_flags=e.IBV_SEND_SIGNALED)
    w.set_wr_rdma(bmr.rkey, bbuf + remote_off)
    a.qp.post_send(w)
    return a.poll()


data = bytes(i % 251 for i in range(3 * PAGE))
amr.write(data, len(data), 0)
madvise(bbuf, 6 * PAGE)
sc = odp_op(60, e.IBV_WR_RDMA_WRITE, 0, len(data), 100)
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and bmr.read(len(data), 100) == data,
    'RDMA WRITE of 3 pages from and into on-demand regions whose pages are absent', sc)
madvise(abuf, 4 * PAGE)
sc = odp_op(61, e.IBV_WR_RDMA_READ, 0, len(data), 100)
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and amr.read(len(data), 0) == data,
    'RDMA READ of 3 pages into dropped pages', sc)
madvise(bbuf + 4 * PAGE, PAGE)
b.qp.post_recv(RecvWR(wr_id=62, num_sge=1, sg=[SGE(bbuf + 4 * PAGE, 256, bmr.lkey)]))
madvise(abuf, PAGE)
amr.write(b'odp send' * 32, 256, 0)
a.qp.post_send(SendWR(wr_id=63, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(abuf, 256, amr.lkey)],
                      send_flags=e.IBV_SEND_SIGNALED))
sc, rc = a.poll(), b.poll()
tap(len(rc) == 1 and rc[0].status == e.IBV_WC_SUCCESS and bmr.read(256, 4 * PAGE) == b'odp send' * 32,
    'a SEND into a receive buffer dropped after it was posted', sc + rc)
madvise(bbuf + 4 * PAGE, PAGE)
madvise(abuf, PAGE)
f = SendWR(wr_id=64, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE(abuf + 8, 8, amr.lkey)],
           send_flags=e.IBV_SEND_SIGNALED)
f.set_wr_atomic(bmr.rkey, bbuf + 4 * PAGE + 8, 5)
a.qp.post_send(f)
sc = a.poll()
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_SUCCESS and int.from_bytes(amr.read(8, 8), 'little') == 0
    and int.from_bytes(bmr.read(8, 4 * PAGE + 8), 'little') == 5,
    'FETCH_AND_ADD on a dropped page runs once, its result into a dropped page', sc)
# A page read but never written is the kernel's shared zero page, read-only: a
# read-only prefetch enters it so; a remote WRITE must then get a page of its own
# (copy on write), or every zero page of the system would change. Two such pages:
# WRITE into the first, then READ the second through the device.
zbuf = mmap(length=2 * PAGE, flags=MAP_ANONYMOUS_ | MAP_PRIVATE_)
zmr = MR(b.pd, 2 * PAGE, ODP, address=zbuf)
b.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_FLAG_FLUSH,
               [SGE(zbuf, 2 * PAGE, zmr.lkey)])
amr.write(b'Z' * 64, 64, 0)
w = SendWR(wr_id=65, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(abuf, 64, amr.lkey)],
           send_flags=e.IBV_SEND_SIGNALED)
w.set_wr_rdma(zmr.rkey, zbuf)
a.qp.post_send(w)
sc = a.poll()
amr.write(b'?' * 64, 64, 64)
r = SendWR(wr_id=66, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(abuf + 64, 64, amr.lkey)],
           send_flags=e.IBV_SEND_SIGNALED)
r.set_wr_rdma(zmr.rkey, zbuf + PAGE)
a.qp.post_send(r)
sc += a.poll()
tap(len(sc) == 2 and all(w.status == e.IBV_WC_SUCCESS for w in sc)
    and zmr.read(64, 0) == b'Z' * 64 and amr.read(64, 64) == b'\0' * 64,
    'a WRITE into a page prefetched read-only (the zero page) lands in a page of its own', sc)
for adv in ('_IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE', '_IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT'):
    try:
        b.pd.advise_mr(getattr(e, adv), e._IBV_ADVISE_MR_FLAG_FLUSH, [SGE(bbuf, 6 * PAGE, bmr.lkey)])
        ok = True
    except PyverbsRDMAError as x:
        ok = x
    tap(ok is True, 'ibv_advise_mr %s over a whole region' % adv[len('_IBV_ADVISE_MR_ADVICE_'):], ok)
try:
    b.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_FLAG_FLUSH,
                   [SGE(bbuf, 6 * PAGE + 1, bmr.lkey)])
    tap(False, 'ibv_advise_mr beyond the region: EINVAL')
except PyverbsRDMAError as x:
    tap(x.error_code == errno.EINVAL, 'ibv_advise_mr beyond the region: EINVAL', x)
romr = MR(b.pd, PAGE, e.IBV_ACCESS_ON_DEMAND | e.IBV_ACCESS_REMOTE_READ)
for what, args, want in (
        ('PREFETCH_WRITE to a region that may not be written: EPERM',
         (e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH, [SGE(romr.buf, PAGE, romr.lkey)]),
         errno.EPERM),
        ('asynchronous advice naming an unknown key: EINVAL',
         (e._IBV_ADVISE_MR_ADVICE_PREFETCH, 0, [SGE(bbuf, PAGE, bmr.lkey ^ 0x100)]), errno.EINVAL)):
    try:
        b.pd.advise_mr(*args)
        tap(False, 'ibv_advise_mr ' + what)
    except PyverbsRDMAError as x:
        tap(x.error_code == want, 'ibv_advise_mr ' + what, x)
after = {d: (counter(d, 'odp_faults'), counter(d, 'odp_faults_served')) for d in ('mrc0', 'mrc1')}
tap(all(after[d][0] > faults0[d][0] and after[d][1] > faults0[d][1] for d in after),
    'both devices met absent pages and served faults (odp_faults, odp_faults_served)', (faults0, after))
# Memory its owner no longer maps cannot be brought in: an access error.
munmap(bbuf + 3 * PAGE, PAGE)
sc = odp_op(67, e.IBV_WR_RDMA_WRITE, 0, 64, 3 * PAGE)
tap(len(sc) == 1 and sc[0].status == e.IBV_WC_REM_ACCESS_ERR,
    'a WRITE into an unmapped part of an on-demand region: REM_ACCESS_ERR', sc)

print('1..%d' % N)
sys.exit(1 if FAILED else 0)
