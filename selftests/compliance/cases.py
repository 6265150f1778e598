# SPDX-License-Identifier: GPL-2.0
"""MetaRoCE compliance cases. Each cites the clause(s) it checks.

The tester is the remote peer; ``T`` is a ``lib.Tester`` around the DUT
helper. Every case creates fresh QPs (random QPNs and initial TSNs) and
closes them, so cases are independent.
"""

import random
import struct
import time

import metaroce_scapy as M
from dut import (DutError, Skip, WC_LOC_LEN_ERR, WC_REM_ACCESS_ERR, WC_REM_INV_REQ_ERR,
                 WC_REM_OP_ERR, WC_RETRY_EXC_ERR, WC_RNR_RETRY_EXC_ERR, WC_SUCCESS,
                 WC_WR_FLUSH_ERR)
from lib import (Fail, Link, Receiver, TOS_CE, TOS_ECT0, check, data_pred, seq_ge, seq_lt)

CASES = []

OP = M.OP
SEND, SEND_IMM, SEND_INV, WRITE, WRITE_IMM, READ_REQ, CAS, FAA = 1, 2, 3, 4, 5, 6, 7, 8
READ_RESP, ATOMIC_RESP, ACK, PROBE = 0x10, 0x11, 0x20, 0x21
SYN_ACK, SYN_SEQ, SYN_RNR, SYN_ACCESS, SYN_INVALID, SYN_REMOTE_OP = 0, 1, 2, 3, 4, 5
FATAL = (SYN_ACCESS, SYN_INVALID, SYN_REMOTE_OP)

# MUST/SHOULD clauses that a wire-level suite cannot check, and why. They
# are listed (not silently dropped) in the coverage table.
NOT_WIRE_TESTABLE = {
    "MR-1.1.1": "editorial (requirement language)",
    "MR-1.1.2": "editorial (clause numbering); checked by proto/tests/spec_clauses.rs",
    "MR-2.1.2": "UDP checksum is computed by the host UDP stack on the userspace target; "
                "kernel target: checked by the VM tier pcap",
    "MR-2.1.3": "IP DF bit: set by the IP layer below a UDP socket; kernel target only",
    "MR-2.2.2": "UD QPs are not exposed by the userspace endpoint (MR-11.1.1: UD is required "
                "only of implementations exposing UD QPs)",
    "MR-2.5.3": "DSCP is a deployment choice; not observable on loopback",
    "MR-2.7.3": "a rule for future revisions of the specification",
    "MR-3.6.2": "UD: see MR-2.2.2",
    "MR-4.3.4": "a rule for consumers (applications), not for the transport",
    "MR-5.6.4": "a rule for consumers (applications), not for the transport",
    "MR-7.5.1": "QPN reuse policy of the host (QPNs are chosen by the tester here)",
    "MR-9.1.2": "QPN allocation is the host's (QPNs are chosen by the tester here)",
    "MR-9.3.2": "deployment advice (uRPF, network-layer authentication)",
    "MR-9.4.1": "allocation behaviour; checked statically by the core's size guard test",
    "MR-10.2.2": "kernel driver allocation rule",
    "MR-11.1.1": "the conformance claim itself; this suite is its evidence",
    "MR-11.1.3": "the go-back-N profile is a core configuration, not reachable from the wire",
    "MR-11.2.2": "source-comment convention; checked by proto/tests/spec_clauses.rs",
    "MR-11.3.1": "reference simulator figures; asserted by the core's cargo test",
}


class Case:
    def __init__(self, fn, clauses, desc):
        self.fn = fn
        self.name = fn.__name__[2:] if fn.__name__.startswith("t_") else fn.__name__
        self.clauses = clauses.split()
        self.desc = desc


def case(clauses, desc):
    def deco(fn):
        CASES.append(Case(fn, clauses, desc))
        return fn
    return deco


_rkeys = set()


def mr(T, access="rwa", size=4096, fill=0, va=None):
    """Registers a fresh MR on the DUT; returns (rkey, va)."""
    while True:
        rkey = random.getrandbits(32) or 1
        if rkey not in _rkeys:
            _rkeys.add(rkey)
            break
    if va is None:
        va = random.getrandbits(40) << 12
    T.dut.cmd("reg_mr rkey=%#x va=%#x len=%d access=%s fill=%d" % (rkey, va, size, access, fill))
    return rkey, va


def pattern(n, seed=1):
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(n))


class link:
    """Context manager: a fresh Link closed on exit."""

    def __init__(self, T, **kw):
        self.L = Link(T, **kw)

    def __enter__(self):
        return self.L

    def __exit__(self, *a):
        self.L.close()
        return False


def need(T, cap):
    if not T.dut.has(cap):
        raise Skip("DUT helper lacks capability %r" % cap)


def counters(T, L):
    if not T.dut.has("counters"):
        return {}
    return T.dut.counters(L.dqpn)


def expect_silence(L, window=0.15, what="packet"):
    got = L.silent(window)
    check(not got, "expected no response to %s, got %s", what, got[:3])


def u64(T, b):
    return struct.unpack(T.dut.endian + "Q", b)[0]


def p64(T, v):
    return struct.pack(T.dut.endian + "Q", v & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------------------
# 0. The tester's own layers against the spec's normative vectors
# ---------------------------------------------------------------------------

@case("MR-3.8.1 MR-1.3.1 MR-3.1.2",
      "tester Scapy layers reproduce the normative byte vectors")
def t_vectors(T):
    p = M.MRH(opcode=WRITE, flags=M.F_LAST | M.F_ACK_REQ, path=3, dqpn=0x123456,
              psn=0x01020304, tsn=0xa0b0c0d0, ts=0xdeadbeef)
    check(bytes(p).hex() == "100488030012345601020304a0b0c0d0deadbeef", "MRH vector")
    r = M.REQH(msn=0x11, ssn=0x22, offset=0x1000, msglen=0x2000, imm=0xcafebabe,
               rkey=0x0badf00d, va=0x00007f0012345678)
    check(bytes(r).hex() == "0000001100000022000010000000200" "0cafebabe0badf00d00007f0012345678",
          "REQH vector")
    a = bytes.fromhex("00000100020c0201000000070000010000000009112233440000" "01f4000100" "04ffff0020"
                      "0102000000000000" + "00" * 16 + "0000000000000080")
    ack = M.ACKH(a)
    check(ack.cum_tsn == 0x100 and ack.syndrome == 2 and ack.rnr_timer == 0x0c and
          ack.echo_path == 2 and int(ack.ack_flags) == 1 and ack.msn == 7 and
          ack.nak_tsn == 0x100 and ack.echo_psn == 9 and ack.echo_ts == 0x11223344 and
          ack.ack_delay == 500 and ack.ce_count == 1 and ack.rcv_count == 4 and
          ack.credit == 0xffff and ack.sack_len == 32, "ACKH vector fields")
    s = set(ack.sacked())
    check({0x101, 0x10a, 0x100 + 256} <= s and 0x102 not in s, "SACK bit numbering")
    check(M.rnr_delay_us(0x0c) == 3 and M.rnr_delay_us(0x28) == 32, "RNR timer examples")
    x = M.MRH(bytes.fromhex(
        "10 01 0c 00 00000042 00000000 00000000 00000001 "
        "00000000 00000000 00000000 00000002 00000000 00000000 0000000000000000 "
        "85 02 00 00 aabbccdd  00 01 00 00  6869".replace(" ", "")))
    check(x.getlayer("Raw").load == b"hi", "extension chain skipped to payload")


# ---------------------------------------------------------------------------
# 1. Basic interoperability, the DUT as responder
# ---------------------------------------------------------------------------

@case("MR-2.1.1 MR-2.2.1 MR-2.3.1 MR-2.3.2 MR-3.2.2 MR-3.2.5 MR-3.2.7 MR-3.5.1 MR-3.5.3 "
      "MR-4.2.1 MR-11.1.2 MR-2.7.2",
      "WRITE is placed at (rkey, va+offset) and acknowledged with a well-formed ACK")
def t_write_basic(T):
    with link(T) as L:
        rkey, va = mr(T, "w")
        data = pattern(100)
        ts = T.now_ts()
        raw, t = L.req_bytes(WRITE, payload=data, rkey=rkey, va=va + 16, msn=0)
        L.msn = 1
        raw = raw[:16] + struct.pack(">I", ts) + raw[20:]
        L.send_raw(raw, 0)
        a = L.cum_reaches((t + 1) & 0xFFFFFFFF)
        check(a is not None, "no ACK for a valid WRITE")
        p, k = a.p, a.ack
        check(p.ver == 1, "ACK version %d", p.ver)
        check(p.rsv0 == 0 and p.rsv1 == 0 and p.rsv2 == 0 and k.rsv == 0 and
              int(p.flags) & 3 == 0 and int(k.ack_flags) & 0xF8 == 0, "reserved bits not zero")
        check(p.psn == 0 and p.tsn == 0, "ACK MRH PSN/TSN must be zero (psn=%d tsn=%d)",
              p.psn, p.tsn)
        check(len(a.raw) == 20 + 68, "ACK length %d", len(a.raw))
        check(k.sack_len == 32, "SACK length %d", k.sack_len)
        check(k.syndrome == SYN_ACK, "syndrome %d", k.syndrome)
        check(k.msn == 1, "ACK MSN (delivery point) %d, expected 1", k.msn)
        check(k.echo_path == 0 and k.echo_ts == ts, "echo path/ts %d/%#x", k.echo_path, k.echo_ts)
        check(k.rcv_count >= 1, "received count 0")
        check(49152 <= a.sport <= 65535, "ACK source port %d not dynamic", a.sport)
        check(T.dut.mem_read(rkey, 16, 100) == data, "memory does not hold the WRITE payload")
        check(T.dut.mem_read(rkey, 0, 16) == bytes(16), "bytes before the WRITE were touched")


@case("MR-3.1.3 MR-4.2.1 MR-6.1.2 MR-4.1.1",
      "multi-packet WRITE sprayed over paths and received in reverse order is placed whole")
def t_write_reordered(T):
    with link(T) as L:
        rkey, va = mr(T, "w", size=8192)
        data = pattern(5000, 2)
        tsns = L.message(WRITE, data, rkey=rkey, va=va, order=[4, 3, 2, 1, 0])
        check(L.cum_reaches((tsns[-1] + 1) & 0xFFFFFFFF) is not None, "not all packets acked")
        check(T.dut.mem_read(rkey, 0, 5000) == data, "placed data differs")


@case("MR-6.1.2", "receiver keys path state on PathId, not on the UDP source port")
def t_pathid_not_port(T):
    with link(T) as L:
        rkey, va = mr(T, "w")
        # Path 1's packets from path 3's port: must still count as path 1.
        raw, t = L.req_bytes(WRITE, payload=b"x" * 8, rkey=rkey, va=va, path=1, msn=0)
        L.msn = 1
        T.send(raw, L.ports[3])
        a = L.recv_ack(1.0)
        check(a is not None, "no ACK")
        check(a.ack.echo_path == 1, "echo path %d, expected 1", a.ack.echo_path)


@case("MR-2.2.1 MR-4.2.3 MR-4.3.1 MR-3.2.4",
      "SEND and SEND_IMM consume receive WQEs in SSN order; completions in order with imm")
def t_send_recv(T):
    with link(T) as L:
        T.dut.cmd("post_recv qpn=%#x wr=11 len=4096" % L.dqpn)
        T.dut.cmd("post_recv qpn=%#x wr=12 len=64" % L.dqpn)
        d1, d2 = pattern(3000, 3), b"hello"
        t1 = L.message(SEND, d1, order=[2, 0, 1])
        raw, t2 = L.req_bytes(SEND_IMM, payload=d2, msn=L.msn, ssn=L.ssn, imm=0xabcdef01,
                              flags=M.F_LAST | M.F_ACK_REQ | M.F_SOLICITED, path=1)
        L.msn += 1
        L.ssn += 1
        L.send_raw(raw, 1)
        c = T.dut.wait_cq(L.dqpn, 2, 2000)
        check(len(c) == 2, "expected 2 receive completions, got %s", c)
        check([x["wr"] for x in c] == [11, 12], "completion order %s", c)
        check(c[0]["status"] == WC_SUCCESS and c[0]["len"] == 3000 and c[0]["opcode"] == "recv",
              "first completion %s", c[0])
        check(c[1]["imm"] == 0xabcdef01 and c[1]["len"] == 5, "imm completion %s", c[1])
        check(c[1]["solicited"], "SOLICITED flag not reported in the receive completion")
        check(not c[0]["solicited"], "SOLICITED reported on a message without it")
        buf = bytes.fromhex(T.dut.cmd("recv_buf qpn=%#x wr=11" % L.dqpn)["data"])
        check(buf[:3000] == d1, "receive buffer content")
        a = L.cum_reaches((t2 + 1) & 0xFFFFFFFF)
        check(a is not None and a.ack.msn == 2, "delivery point after two SENDs: %s", a)


@case("MR-4.2.3 MR-7.3.2 MR-7.4.1",
      "SEND longer than its receive WQE: local length error and NAK-INVALID")
def t_send_too_long(T):
    with link(T) as L:
        T.dut.cmd("post_recv qpn=%#x wr=5 len=100" % L.dqpn)
        L.message(SEND, pattern(200))
        a = L.recv_ack(1.0, lambda r: r.ack.syndrome != SYN_ACK)
        check(a is not None and a.ack.syndrome == SYN_INVALID, "expected NAK-INVALID, got %s", a)
        check(a.ack.msn == 0, "NAK names message %d", a.ack.msn)
        c = T.dut.wait_cq(L.dqpn, 1, 1000)
        check(c and c[0]["wr"] == 5 and c[0]["status"] == WC_LOC_LEN_ERR,
              "receive completion %s", c)


@case("MR-4.2.3", "WRITE_IMM consumes a receive WQE and reports the immediate")
def t_write_imm(T):
    with link(T) as L:
        rkey, va = mr(T, "w")
        T.dut.cmd("post_recv qpn=%#x wr=77 len=0" % L.dqpn)
        L.message(WRITE_IMM, pattern(300), rkey=rkey, va=va, imm=0x1234)
        c = T.dut.wait_cq(L.dqpn, 1, 1000)
        check(c and c[0]["wr"] == 77 and c[0]["opcode"] == "recv_imm" and c[0]["imm"] == 0x1234
              and c[0]["len"] == 300 and c[0]["status"] == WC_SUCCESS, "completion %s", c)
        check(T.dut.mem_read(rkey, 0, 300) == pattern(300), "WRITE_IMM data")


def ack_all(L, rx, msn):
    """Acknowledges all DUT packets in rx (list of Rx) on their paths."""
    R = Receiver(L)
    for r in rx:
        R.take(r)
    for p in sorted(R.path_hi):
        R.ack_path(p, msn=msn)
    return R


@case("MR-4.4.1 MR-3.4.1 MR-3.4.2 MR-5.1.1 MR-2.6.2 MR-2.5.1 MR-5.4.5 MR-7.1.2 MR-3.2.8",
      "READ: responses are self-describing, MTU-segmented, reliable, ECT(0), LAST+ACK_REQ on last")
def t_read_basic(T):
    with link(T) as L:
        data = pattern(2500, 4)
        rkey, va = mr(T, "r")
        T.dut.cmd("mem_write rkey=%#x off=0 data=%s" % (rkey, data.hex()))
        L.req(READ_REQ, rkey=rkey, va=va, msglen=2500, msn=0)
        L.msn = 1
        rs = []
        while len(rs) < 3:
            r = L.recv(1.0, lambda r: r.op == READ_RESP)
            check(r is not None, "only %d READ_RESP packets", len(rs))
            rs.append(r)
        rs.sort(key=lambda r: r.rsp.offset)
        got = b""
        for i, r in enumerate(rs):
            s = r.rsp
            check(s.req_msn == 0 and s.resp_len == 2500 and s.offset == 1024 * i and s.rsv == 0,
                  "RSPH %s", s.summary())
            pl = r.payload()
            check(len(pl) == (1024 if i < 2 else 452), "payload %d bytes in packet %d", len(pl), i)
            last = bool(r.flags & M.F_LAST)
            check(last == (i == 2), "LAST flag on packet %d", i)
            if last:
                check(r.flags & M.F_ACK_REQ, "ACK_REQ missing on the last packet")
            check(r.tos & 3 == 2, "data packet not ECT(0): tos %#x", r.tos)
            got += pl
        check(got == data, "READ data differs")
        tsns = sorted((r.p.tsn - L.dtsn0) & 0xFFFFFFFF for r in rs)
        check(tsns == [0, 1, 2], "response TSNs not the first three of the DUT's direction: %s",
              tsns)
        check(all(r.p.ts != 0 for r in rs), "zero transmit timestamp")
        ack_all(L, rs, 0)
        again = [r for r in L.silent(0.1) if data_pred(r)]
        check(not again, "acknowledged READ responses were sent again: %s", again[:2])


@case("MR-3.3.4 MR-4.4.5 MR-3.4.1 MR-4.4.1",
      "FAA and CAS: original value big-endian in ATOMIC_RESP, memory updated once")
def t_atomics(T):
    with link(T) as L:
        rkey, va = mr(T, "a")
        T.dut.cmd("mem_write rkey=%#x off=8 data=%s" % (rkey, p64(T, 100).hex()))
        steps = [(FAA, 5, 0, 100, 105), (CAS, 7, 105, 105, 7), (CAS, 9, 1, 7, 7)]
        for i, (op, sw, cmp_, orig, after) in enumerate(steps):
            L.req(op, rkey=rkey, va=va + 8, msn=i, swap=sw, compare=cmp_)
            L.msn = i + 1
            r = L.recv(1.0, lambda r: r.op == ATOMIC_RESP)
            check(r is not None, "no ATOMIC_RESP for step %d", i)
            s = r.rsp
            check(s.req_msn == i and s.offset == 0 and s.resp_len == 8, "RSPH %s", s.summary())
            pl = r.payload()
            check(len(pl) == 8 and struct.unpack(">Q", pl)[0] == orig,
                  "original value %s, expected %d", pl.hex(), orig)
            check(r.flags & M.F_LAST, "ATOMIC_RESP without LAST")
            check(u64(T, T.dut.mem_read(rkey, 8, 8)) == after, "memory after step %d", i)
            ack_all(L, [r], i + 1)


@case("MR-4.4.5 MR-2.2.3 MR-7.3.2", "misaligned atomic is an invalid request (NAK-INVALID)")
def t_atomic_misaligned(T):
    with link(T) as L:
        rkey, va = mr(T, "a", fill=0x11)
        L.req(FAA, rkey=rkey, va=va + 4, msn=0, swap=1)
        a = L.recv(1.0, lambda r: r.op == ACK and r.ack.syndrome != SYN_ACK)
        check(a is not None and a.ack.syndrome == SYN_INVALID, "expected NAK-INVALID, got %s", a)
        check(T.dut.mem_read(rkey, 0, 16) == b"\x11" * 16, "memory changed")


@case("MR-9.2.3 MR-4.3.2", "SEND_INV invalidates a key it may invalidate; later access fails")
def t_send_inv(T):
    with link(T) as L:
        rkey, va = mr(T, "wi")
        T.dut.cmd("post_recv qpn=%#x wr=1 len=64" % L.dqpn)
        L.message(SEND_INV, b"inv", imm=rkey)
        c = T.dut.wait_cq(L.dqpn, 1, 1000)
        check(c and c[0]["inv"] == rkey and c[0]["status"] == WC_SUCCESS,
              "completion %s lacks the invalidated key", c)
        check(T.dut.cmd("mem_read rkey=%#x off=0 len=1" % rkey)["valid"] == "0",
              "MR still valid after SEND_INV")
        L.message(WRITE, b"zz", rkey=rkey, va=va)
        a = L.recv(1.0, lambda r: r.op == ACK and r.ack.syndrome != SYN_ACK)
        check(a is not None and a.ack.syndrome == SYN_ACCESS,
              "WRITE to an invalidated key: %s", a)


@case("MR-9.2.3 MR-7.3.2", "SEND_INV of a key without invalidate permission: fatal NAK")
def t_send_inv_denied(T):
    with link(T) as L:
        rkey, va = mr(T, "w")
        T.dut.cmd("post_recv qpn=%#x wr=1 len=64" % L.dqpn)
        L.message(SEND_INV, b"inv", imm=rkey)
        a = L.recv(1.0, lambda r: r.op == ACK and r.ack.syndrome != SYN_ACK)
        check(a is not None and a.ack.syndrome in FATAL, "expected a fatal NAK, got %s", a)
        check(T.dut.cmd("mem_read rkey=%#x off=0 len=1" % rkey)["valid"] == "1",
              "key invalidated without permission")
