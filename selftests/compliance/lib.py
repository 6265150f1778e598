# SPDX-License-Identifier: GPL-2.0
"""The tester: plays the remote MetaRoCE peer over plain UDP sockets.

Every packet is built and parsed with the independent Scapy layers in
``metaroce_scapy`` (from the spec's diagrams), never with the core's code.
Paths are emulated with one UDP socket per source port; every receive has
a timeout.
"""

import errno
import random
import socket
import struct
import time

import metaroce_scapy as M
from dut import NeedsSetup, Skip

IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TOS_ECT0, TOS_CE = 2, 3

# Timer profile for a Python peer (MR-8.6.1: parameters are configurable).
# A scripted peer answers in ~1 ms, not in microseconds, so the suite
# configures timers in milliseconds and checks every bound against the
# values it configured.
SLOW = dict(initial_rtt_us=20000, min_path_rto_us=200000, min_rto_us=400000,
            max_rto_us=3000000, ack_delay_us=2)


class Fail(Exception):
    pass


class AtLeast:
    """A create_qp value a case needs as a lower bound only: sent as is to a
    configurable DUT; a DUT with fixed values runs the case if its own value is
    at least this."""

    def __init__(self, v, send=None):
        self.v = v if send is None else send     # what a configurable DUT is given
        self.need = v

    def ok(self, have):
        return have >= self.need

    def __str__(self):
        return ">=%d" % self.need


class AtMost(AtLeast):
    def ok(self, have):
        return have <= self.need

    def __str__(self):
        return "<=%d" % self.need


class Prefer(AtLeast):
    """A value that sharpens a check on a configurable DUT (e.g. a long ack_delay
    makes "answered at once" meaningful) but that the case can check against any
    fixed value too."""

    def ok(self, have):
        return True

    def __str__(self):
        return "%d (preferred)" % self.v


def sent_value(v):
    """What a configurable DUT is given for a case's value (a bound's `v`)."""
    return v.v if isinstance(v, AtLeast) else v


def timers_outpace_tester(L):
    """Whether the DUT's retransmission timers may fire before a scripted peer
    answers (a fixed configuration below SLOW's), so that a retransmission can
    race an acknowledgement in flight."""
    return (L.conf.get("initial_rtt_us", 0) < SLOW["initial_rtt_us"] or
            L.conf.get("min_path_rto_us", 0) < SLOW["min_path_rto_us"])


def effective_conf(dut, paths, cfg):
    """(keys to send with create_qp, the QP's effective configuration).

    A DUT with the "config" capability takes SLOW plus the case's values. A DUT
    without it (kernel target: verbs has no per-QP timers) runs with the values
    it reports in `fixed` plus what modify_qp sets (`settable`); a case asking
    for anything else is skipped, naming the value it needs. When every such
    value is of a key the DUT's set-up changes (`setup`), the skip says how to
    set the DUT up for the case: as a configurable DUT would be, SLOW plus the
    case's values, in those keys."""
    if dut.has("config"):
        conf = dict(SLOW)
        conf["paths"] = sent_value(paths)
        conf.update({k: sent_value(v) for k, v in cfg.items()})
        return conf, conf
    conf = dict(dut.fixed)
    send = {}
    unmet = []     # (key, what the case needs, why)
    if isinstance(paths, Prefer):
        pass
    elif paths != conf.get("paths", paths):
        unmet.append(("paths", "needs %d paths; the DUT sprays over a fixed %d"
                      % (paths, conf["paths"])))
    for k, v in cfg.items():
        if k in dut.settable and not isinstance(v, AtLeast):
            send[k] = conf[k] = v
        elif k in conf and (v.ok(conf[k]) if isinstance(v, AtLeast) else v == conf[k]):
            pass
        else:
            unmet.append((k, "needs create_qp %s%s%s; the DUT's %s is %s (no per-QP configuration)"
                          % (k, " " if isinstance(v, AtLeast) else "=", v, k,
                             conf.get(k, "not settable"))))
    if unmet:
        why = unmet[0][1]
        if all(k in dut.setup for k, _ in unmet):
            want = {k: v for k, v in SLOW.items() if k in dut.setup}
            want.update({k: sent_value(v) for k, v in cfg.items()
                         if k in dut.setup and k not in send})
            if "paths" in dut.setup and not isinstance(paths, Prefer):
                want["paths"] = sent_value(paths)
            raise NeedsSetup(want, why)
        raise Skip(why)
    return send, conf


def check(cond, msg, *a):
    if not cond:
        raise Fail(msg % a if a else msg)


class Rx:
    """A received packet: scapy view plus metadata."""

    def __init__(self, raw, sport, tos, t, arrival=None):
        self.raw = raw
        self.sport = sport
        self.tos = tos
        self.t = t
        # When the packet reached the tester's socket (CLOCK_REALTIME, from the
        # kernel's receive timestamp): comparable with time.time() taken when the
        # tester sent something, to tell what the DUT sent before it could react.
        self.arrival = arrival if arrival is not None else time.time()
        self._p = None

    @property
    def p(self):
        """The Scapy view, built when first needed (stale traffic of other QPs
        is told apart by dqpn without it)."""
        if self._p is None:
            self._p = M.MRH(self.raw)
        return self._p

    @property
    def dqpn(self):
        return int.from_bytes(self.raw[5:8], "big") if len(self.raw) >= 8 else None

    @property
    def op(self):
        return self.p.opcode

    @property
    def flags(self):
        return int(self.p.flags)

    def hdr(self, cls):
        return self.p.getlayer(cls)

    @property
    def ack(self):
        return self.p.getlayer(M.ACKH)

    @property
    def req(self):
        return self.p.getlayer(M.REQH)

    @property
    def rsp(self):
        return self.p.getlayer(M.RSPH)

    def payload(self):
        """Bytes after the opcode headers (and any extension chain)."""
        r = self.p.getlayer("Raw")
        return bytes(r.load) if r is not None else b""

    def __repr__(self):
        s = "%s path=%d psn=%d tsn=%d flags=%#x sport=%d" % (
            M.OPCODES.get(self.op, hex(self.op)), self.p.path, self.p.psn, self.p.tsn,
            self.flags, self.sport)
        if self.op == 0x20:
            a = self.ack
            s += " cum=%d syn=%d msn=%d echo_path=%d echo_psn=%d rcv=%d ce=%d af=%#x" % (
                a.cum_tsn, a.syndrome, a.msn, a.echo_path, a.echo_psn, a.rcv_count,
                a.ce_count, int(a.ack_flags))
        if getattr(self, "late_ms", None) is not None:
            s += " (sent <=%.1f ms, arrived %.1f ms after the tester's packet)" % (
                self.late_ms, self.arrival_ms)
        return s


class Tester:
    def __init__(self, dut, ip, port, dut_ip):
        self.dut = dut
        self.ip = ip
        self.port = port
        self.dut_ip = dut_ip
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.rx.bind((ip, port))
        self.rx.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.txs = {}
        self.backlog = []
        self.t0 = time.monotonic()
        # Waits for expected packets (and silence windows) are stretched by this
        # for a slow DUT (an emulated guest); bounds checked against the DUT's
        # timers are measured times and never scaled.
        self.wait_scale = getattr(dut, "wait_scale", 1.0)

    def tx_sock(self, sport):
        s = self.txs.get(sport)
        if s is None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((self.ip, sport))
            self.txs[sport] = [s, -1]
            s = self.txs[sport]
        return s

    def free_ports(self, n):
        """n consecutive-ish free source ports in the dynamic range (MR-2.3.2)."""
        out = []
        while len(out) < n:
            p = random.randrange(49152, 65536)
            if p in out or p == self.port:
                continue
            try:
                self.tx_sock(p)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    continue
                raise
            out.append(p)
        return out

    def send(self, raw, sport, tos=TOS_ECT0, dport=None):
        s = self.tx_sock(sport)
        if s[1] != tos:
            s[0].setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            s[1] = tos
        s[0].sendto(raw, (self.dut_ip, dport or self.port))

    def _recv_raw(self, timeout):
        self.rx.settimeout(max(timeout, 0.0001))
        try:
            data, anc, _, addr = self.rx.recvmsg(65536, socket.CMSG_SPACE(4) +
                                                 socket.CMSG_SPACE(16))
        except (socket.timeout, BlockingIOError):
            return None
        tos = 0
        arrival = None
        for lvl, typ, d in anc:
            if lvl == socket.IPPROTO_IP and typ == socket.IP_TOS and d:
                tos = d[0]
            elif lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(d) >= 16:
                sec, nsec = struct.unpack("qq", d[:16])
                arrival = sec + nsec / 1e9
        return Rx(data, addr[1], tos, time.monotonic(), arrival)

    def recv(self, qpn, timeout, pred=None):
        """Next packet addressed to our QPN `qpn` matching pred, or None."""
        for i, r in enumerate(self.backlog):
            if r.dqpn == qpn and (pred is None or pred(r)):
                return self.backlog.pop(i)
        end = time.monotonic() + timeout * self.wait_scale
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r = self._recv_raw(left)
            if r is None:
                return None
            if len(r.raw) < 20 or r.dqpn != qpn:
                continue  # stale traffic of an earlier case
            if pred is None or pred(r):
                return r
            self.backlog.append(r)
            if len(self.backlog) > 4096:
                self.backlog.pop(0)

    def drain(self, qpn, timeout):
        """Everything for qpn arriving within `timeout` (a silence window)."""
        out = [r for r in self.backlog if r.dqpn == qpn]
        self.backlog = [r for r in self.backlog if r.dqpn != qpn]
        end = time.monotonic() + timeout * self.wait_scale
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return out
            r = self._recv_raw(left)
            if r is None:
                return out
            if len(r.raw) >= 20 and r.dqpn == qpn:
                out.append(r)

    def now_ts(self):
        return int((time.monotonic() - self.t0) * 1e9) & 0xFFFFFFFF


def rand24():
    return random.randrange(1, 1 << 24)


class Link:
    """One RC connection between the tester (peer) and a fresh DUT QP."""

    def __init__(self, T, paths=4, mtu=1024, **cfg):
        self.T = T
        self.dut = T.dut
        self.dqpn = rand24()    # the DUT's QPN (unless the DUT allocates it)
        self.pqpn = rand24()    # ours
        self.dtsn0 = random.getrandbits(T.dut.tsn_bits)
        self.tsn0 = random.getrandbits(T.dut.tsn_bits)
        send, self.conf = effective_conf(self.dut, paths, cfg)
        # paths=Prefer(n): n paths where configurable, else the DUT's own count.
        paths = self.conf.pop("paths", paths)
        self.npaths = paths
        self.mtu = mtu
        self.ports = T.free_ports(paths)
        extra = " ".join("%s=%s" % kv for kv in send.items())
        r = self.dut.cmd("create_qp qpn=%#x peer_qpn=%#x tsn=%#x peer_tsn=%#x peer=%s "
                         "peer_port=%d paths=%d mtu=%d %s" % (self.dqpn, self.pqpn, self.dtsn0,
                                                              self.tsn0, T.ip, T.port, paths, mtu,
                                                              extra))
        if "qpn" in r:          # a DUT that allocates its QP numbers (kernel target)
            self.dqpn = int(r["qpn"], 0)
        self.tsn = self.tsn0
        self.psn = [random.getrandbits(32) for _ in range(paths)]
        self.msn = 0
        self.ssn = 0
        self.sent = {}         # tsn -> raw bytes (for retransmission)
        self.rr = 0

    def close(self):
        try:
            self.dut.cmd("destroy_qp qpn=%#x" % self.dqpn)
        except Exception:
            pass

    # ---- building -------------------------------------------------------

    def mrh(self, op, flags=0, path=0, psn=None, tsn=None, ts=None, dqpn=None, **kw):
        if psn is None:
            psn = self.psn[path % self.npaths]
            self.psn[path % self.npaths] = (psn + 1) & 0xFFFFFFFF
        return M.MRH(opcode=op, flags=flags, path=path, dqpn=self.dqpn if dqpn is None else dqpn,
                     psn=psn, tsn=0 if tsn is None else tsn,
                     ts=self.T.now_ts() if ts is None else ts, **kw)

    def next_tsn(self):
        t = self.tsn
        self.tsn = (self.tsn + 1) & 0xFFFFFFFF
        return t

    def req_bytes(self, op, payload=b"", msn=None, ssn=0, offset=0, msglen=None, imm=0,
                  rkey=0, va=0, flags=None, path=0, tsn=None, swap=0, compare=0, ext=b"",
                  mrh_kw=None):
        if tsn is None:
            tsn = self.next_tsn()
        if msn is None:
            msn = self.msn
        if msglen is None:
            msglen = 8 if op in M.ATOMIC_OPS else offset + len(payload)
        if flags is None:
            flags = 0
            if op in (0x06, 0x07, 0x08, 0x0b) or offset + len(payload) == msglen:
                flags |= M.F_LAST | M.F_ACK_REQ
        if ext:
            flags |= M.F_EXT
        p = self.mrh(op, flags=flags, path=path, tsn=tsn, **(mrh_kw or {})) / M.REQH(
            msn=msn, ssn=ssn, offset=offset, msglen=msglen, imm=imm, rkey=rkey, va=va)
        raw = bytes(p)
        if op in M.ATOMIC_OPS:
            raw += bytes(M.ATH(swap_add=swap, compare=compare))
        raw += ext + payload
        self.sent[tsn] = raw
        return raw, tsn

    def send_raw(self, raw, path=0, tos=TOS_ECT0):
        self.T.send(raw, self.ports[path % self.npaths], tos)

    def req(self, op, path=0, tos=TOS_ECT0, **kw):
        raw, tsn = self.req_bytes(op, path=path, **kw)
        self.send_raw(raw, path, tos)
        return tsn

    def message(self, op, data, rkey=0, va=0, imm=0, paths=None, order=None, ssn=None,
                msn=None, tos=TOS_ECT0):
        """Sends one whole message (segmented by MTU); returns its TSNs."""
        if msn is None:
            msn = self.msn
            self.msn += 1
        if ssn is None:
            ssn = 0
            if op in (0x01, 0x02, 0x03, 0x05):
                ssn = self.ssn
                self.ssn += 1
        n = max(1, -(-len(data) // self.mtu))
        pkts = []
        for i in range(n):
            off = i * self.mtu
            path = (paths[i % len(paths)] if paths else (self.rr % self.npaths))
            self.rr += 1
            raw, tsn = self.req_bytes(op, payload=data[off:off + self.mtu], msn=msn, ssn=ssn,
                                      offset=off, msglen=len(data), imm=imm, rkey=rkey, va=va,
                                      path=path)
            pkts.append((raw, tsn, path))
        for i in (order or range(n)):
            raw, tsn, path = pkts[i]
            self.send_raw(raw, path, tos)
        return [t for _, t, _ in pkts]

    def probe(self, path=0, length=88, ts=None):
        p = bytes(self.mrh(0x21, path=path, psn=0, tsn=0, ts=ts))
        p += b"\x00" * max(0, length - len(p))
        self.send_raw(p[:length], path)

    # ---- receiving ------------------------------------------------------

    def recv(self, timeout=1.0, pred=None):
        return self.T.recv(self.pqpn, timeout, pred)

    def recv_ack(self, timeout=1.0, pred=None):
        return self.recv(timeout, lambda r: r.op == 0x20 and (pred is None or pred(r)))

    def ack_until(self, pred, timeout=1.0):
        """Waits for an ACK satisfying pred, skipping intermediate ACKs."""
        return self.recv_ack(timeout, pred)

    def cum_reaches(self, tsn_excl, timeout=1.0):
        return self.ack_until(lambda r: seq_ge(r.ack.cum_tsn, tsn_excl), timeout)

    def silent(self, window=0.15):
        return self.T.drain(self.pqpn, window)

    # ---- acknowledging the DUT (tester as responder) ---------------------

    def ack(self, cum, sacked=(), path=0, echo_psn=0, echo_ts=0, rcv=1, ce=0, flags=0,
            syndrome=0, msn=0, nak_tsn=0, credit=0xFFFF, rnr_timer=0, ack_delay=0,
            sack_len=32, raw_sack=None, mrh_kw=None):
        a = M.ACKH(cum_tsn=cum, syndrome=syndrome, rnr_timer=rnr_timer, echo_path=path,
                   ack_flags=flags, msn=msn, nak_tsn=nak_tsn, echo_psn=echo_psn,
                   echo_ts=echo_ts, ack_delay=ack_delay, ce_count=ce, rcv_count=rcv,
                   credit=credit, sack_len=sack_len,
                   sack=raw_sack if raw_sack is not None else M.sack_bitmap(cum, sacked))
        raw = bytes(self.mrh(0x20, path=path, psn=0, tsn=0, **(mrh_kw or {})) / a)
        self.send_raw(raw, path)
        return raw


def seq_lt(a, b):
    return ((a - b) & 0xFFFFFFFF) >= 0x80000000


def seq_ge(a, b):
    return not seq_lt(a, b)


class Receiver:
    """Tester-side receive state for DUT data (the tester as responder)."""

    def __init__(self, L):
        self.L = L
        self.cum = L.dtsn0
        self.got = {}            # tsn -> Rx (latest)
        self.path_hi = {}        # path -> (psn, ts)
        self.path_cnt = {}
        self.path_ce = {}

    def take(self, r):
        t = r.p.tsn
        self.got.setdefault(t, r)
        p = r.p.path
        hi = self.path_hi.get(p)
        if hi is None or seq_lt(hi[0], r.p.psn):
            self.path_hi[p] = (r.p.psn, r.p.ts)
        self.path_cnt[p] = self.path_cnt.get(p, 0) + 1
        while self.cum in self.got:
            self.cum = (self.cum + 1) & 0xFFFFFFFF

    def answer_probe(self, r):
        """ACK with the PROBE flag for the DUT's PROBE `r` (MR-6.3.2): brings its
        path back into service."""
        return self.L.ack(self.cum, path=r.p.path, echo_ts=r.p.ts, rcv=0, flags=M.AF_PROBE,
                          echo_psn=self.path_hi.get(r.p.path, (0, 0))[0])

    def ack_path(self, p, msn=0, drop=(), **kw):
        """ACK for path p reporting everything received except `drop` TSNs."""
        cum = self.L.dtsn0
        while cum in self.got and cum not in drop:
            cum = (cum + 1) & 0xFFFFFFFF
        sacked = [t for t in self.got if t not in drop and seq_lt(cum, t)]
        hi = self.path_hi.get(p, (0, 0))
        n = self.path_cnt.pop(p, 0)
        kw.setdefault("rcv", n)
        return self.L.ack(cum, sacked, path=p, echo_psn=hi[0], echo_ts=hi[1], msn=msn, **kw)


def dut_sent_after(t, pkts, ref=()):
    """The packets of `pkts` the DUT may have sent after tester time t (time.time()).

    A packet's send time on the tester's clock is bounded from above by its
    transmit timestamp (the DUT's ns clock, MR-3.2.8) plus the smallest
    arrival-minus-timestamp offset seen over `pkts` and `ref` (offset = clock
    difference + one-way delay, so the minimum overestimates no send time).
    Packets bounded at or before t were sent before the DUT could react to
    what the tester sent at t."""
    allp = [r for r in list(pkts) + list(ref) if r.p.ts]
    if not allp:
        return list(pkts)
    base = allp[0].p.ts

    def rel(r):     # DUT time relative to base, seconds (32-bit ns wraps)
        return (((r.p.ts - base + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)) / 1e9
    off = min(r.arrival - rel(r) for r in allp)
    out = [r for r in pkts if not r.p.ts or rel(r) + off > t]
    for r in out:   # for failure messages: how late the DUT sent it, at the earliest
        r.late_ms = (rel(r) + off - t) * 1e3 if r.p.ts else None
        r.arrival_ms = (r.arrival - t) * 1e3
    return out


def data_pred(r):
    return r.op in M.RELIABLE_OPS
