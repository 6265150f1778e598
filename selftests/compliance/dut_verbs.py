#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""DUT control helper for the kernel target: dut.py's line protocol over
stdin/stdout, implemented with pyverbs against an ``rdma_metaroce`` device.

  dut_verbs.py --dev mrc0 --gid-index N --addr 198.18.0.1

create_qp is ibv_create_qp (RC) plus ibv_modify_qp to INIT/RTR/RTS with the
peer's QPN, the verbs PSNs (which the module uses as the initial TSNs of the
two directions, MR-7.1.5) and the peer's IPv4-mapped GID. The device
allocates QP numbers and memory keys and registers real buffers, so
create_qp answers ``qpn=`` and reg_mr answers ``rkey=`` and ``va=``; the
suite adopts them.

Verbs gives no per-QP control of the transport's timers or congestion
control: the module takes them from its parameters (rdma_metaroce/engine.rs,
``ConnTuning``), for every QP of a load. ``hello`` reports those values
(``fixed=``; --conf names the parameters the module was loaded with), the
attributes that modify_qp does set (``settable=``), the keys a reload of the
module changes (``setup=``: the suite's --dut-setup reloads it with the values
a case needs, metaroce_compliance.sh --setup) and the TSN width (verbs PSNs are
24 bits). ``paths`` reads the QP's paths from ``rdma -dd resource show qp``.
"""

import argparse
import ctypes
import errno
import mmap
import os
import re
import select
import socket
import subprocess
import sys
import time

import pyverbs.device as d
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ, CompChannel
from pyverbs.mr import MR, MW, MREx, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pyverbs_compat import e  # noqa: E402

# The module's connection configuration with its default parameters
# (rdma_metaroce/engine.rs, ConnTuning::DEFAULT and Engine::config_for), plus
# proto's defaults it keeps (Config::new: ack_every; CcConfig::default: the rest of
# congestion control). --conf gives the parameters the module was loaded with.
FIXED = dict(paths=8, ack_delay_us=500, ack_every=4, initial_rtt_us=500, min_path_rto_us=10000,
             min_rto_us=50000, max_rto_us=500000, init_window=128 * 1024,
             max_window=4 * 1024 * 1024, target_qdelay_us=1000, ai=4096, beta_q16=52429,
             max_mdf_q16=32768, ecn_g_shift=4)
# Each FIXED key's name among a connected QP's driver attributes (engine.rs
# describe), by which _check_conf compares the table with what the module runs.
MODULE_NAMES = dict(paths="num_paths", ack_delay_us="ack_delay_us", ack_every="ack_every",
                    initial_rtt_us="initial_rtt_us", min_path_rto_us="min_path_rto_us",
                    min_rto_us="min_rto_us", max_rto_us="max_rto_us", init_window="init_window",
                    max_window="max_window", target_qdelay_us="cc_target_delay_us",
                    ai="cc_ai_bytes", beta_q16="cc_beta_q16", max_mdf_q16="cc_max_mdf_q16",
                    ecn_g_shift="ecn_gain_shift")
assert set(MODULE_NAMES) == set(FIXED)
# The create_qp keys a module parameter sets (for all QPs of a load): the suite's
# --dut-setup reloads the module with other values of these (metaroce_compliance.sh).
SETUP = ("paths", "ack_delay_us", "ack_every", "initial_rtt_us", "min_path_rto_us", "min_rto_us",
         "max_rto_us", "init_window", "max_window", "target_qdelay_us", "ecn_g_shift")
# MR-7.1.4: no parameter block reaches the module, so it takes its peer's path
# count to be the largest a peer may have, whatever its own num_paths.
PEER_PATHS = 8
# create_qp keys that modify_qp sets per QP.
# Verbs' min_rnr_timer is IBTA's table of delays (code 0 = 655.36 ms, in 10 us
# units), which the module turns into the wire's RNR Timer code (MR-3.5.6: delay
# ((8 + m) << e) * 125 ns) as the shortest not below it (MR-7.1.2). The suite asks
# for a wire code; only codes some verbs code maps to can be configured.
_VERBS_RNR_10US = (65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
                   384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288,
                   16384, 24576, 32768, 49152)


def _wire_rnr_ns(code):
    m, e = code & 7, min(code >> 3, 19)
    return ((8 + m) << e) * 1000 // 8


def _wire_rnr_code(ns):
    return next((c for c in range(160) if _wire_rnr_ns(c) >= ns), 159)


def verbs_rnr_code(wire):
    """The verbs min_rnr_timer whose wire RNR Timer code is `wire`."""
    for v, units in enumerate(_VERBS_RNR_10US):
        if _wire_rnr_code(units * 10_000) == wire:
            return v
    raise Err("unsupported: RNR timer code %#x is not the image of any verbs min_rnr_timer" % wire)


SETTABLE = ("retry_cnt", "rnr_retry", "rnr_timer", "max_rd_atomic", "mtu", "uc")
MTUS = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024,
        2048: e.IBV_MTU_2048, 4096: e.IBV_MTU_4096}

SQ_DEPTH, RQ_DEPTH = 128, 64
# wr_id of the helper's own memory window binds (cases use small wr ids).
BIND_WR_ID = 0xB1D0B1D0
REMOTE = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
          e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_FLUSH_GLOBAL)
WC_OPCODES = {e.IBV_WC_SEND: "send", e.IBV_WC_RDMA_WRITE: "write", e.IBV_WC_RDMA_READ: "read",
              e.IBV_WC_COMP_SWAP: "cas", e.IBV_WC_FETCH_ADD: "faa", e.IBV_WC_RECV: "recv",
              e.IBV_WC_RECV_RDMA_WITH_IMM: "recv_imm"}
WR_OPCODES = {"send": e.IBV_WR_SEND, "send_imm": e.IBV_WR_SEND_WITH_IMM,
              "send_inv": e.IBV_WR_SEND_WITH_INV, "write": e.IBV_WR_RDMA_WRITE,
              "write_imm": e.IBV_WR_RDMA_WRITE_WITH_IMM, "read": e.IBV_WR_RDMA_READ,
              "cas": e.IBV_WR_ATOMIC_CMP_AND_SWP, "faa": e.IBV_WR_ATOMIC_FETCH_AND_ADD}


# The protocol core's PathStatus, as the module's path<i>_status attribute numbers it.
PATH_STATUS = {0: "active", 1: "suspect", 2: "failed"}


class Err(Exception):
    pass


def num(v):
    return int(v, 0)


def mapped_gid(ip):
    a = [int(x) for x in ip.split(".")]
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(a)


class Qp:
    """One RC QP with its own CQ (send and receive) and completion channel."""

    def __init__(self, h, a):
        self.h = h
        self.ch = CompChannel(h.ctx)
        self.cq = CQ(h.ctx, 2 * (SQ_DEPTH + RQ_DEPTH), None, self.ch, 0)
        self.cq.req_notify()
        cap = QPCap(max_send_wr=SQ_DEPTH, max_recv_wr=RQ_DEPTH, max_send_sge=1, max_recv_sge=1,
                    max_inline_data=0)
        # uc=1: a UC QP (MetaRoCE MR-4.6); pyverbs' to_rts leaves out the RC-only
        # attributes for it.
        qp_type = e.IBV_QPT_UC if num(a.get("uc", "0")) else e.IBV_QPT_RC
        self.qp = QP(h.pd, QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq, cap=cap,
                                      sq_sig_all=0))
        self.qpn = self.qp.qp_num
        self.local = {}       # wr -> MR (send side local buffer)
        self.held = []        # completions polled while binding a memory window
        self.recv = {}        # wr -> MR (receive buffer)
        self.mrs = []         # reg_mr keys registered while this QP was the newest
        mtu = num(a.get("mtu", "1024"))
        if mtu not in MTUS:
            raise Err("mtu %d is not a verbs path MTU" % mtu)
        paths = num(a.get("paths", str(h.conf["paths"])))
        if paths != h.conf["paths"] or num(a.get("peer_paths", str(PEER_PATHS))) != PEER_PATHS:
            raise Err("paths=%d: the module sprays over num_paths=%d and accepts %d from its peer"
                      % (paths, h.conf["paths"], PEER_PATHS))
        if num(a.get("peer_port", str(h.port))) != h.port:
            raise Err("peer_port must be the module's udp_port %d" % h.port)
        for k in a:
            if k not in ("qpn", "peer_qpn", "tsn", "peer_tsn", "peer", "peer_port", "paths",
                         "peer_paths") + SETTABLE:
                raise Err("unsupported create_qp key %s (no per-QP configuration)" % k)
        tsn, peer_tsn = num(a["tsn"]), num(a["peer_tsn"])
        if tsn >= 1 << 24 or peer_tsn >= 1 << 24:
            raise Err("TSNs are 24-bit verbs PSNs here")
        attr = QPAttr(path_mtu=MTUS[mtu])
        attr.qp_access_flags = REMOTE
        attr.dest_qp_num = num(a["peer_qpn"])
        attr.sq_psn = tsn
        attr.rq_psn = peer_tsn
        rd = num(a.get("max_rd_atomic", "32"))
        attr.max_rd_atomic = rd
        attr.max_dest_rd_atomic = rd
        if "rnr_timer" in a:
            attr.min_rnr_timer = verbs_rnr_code(num(a["rnr_timer"]))
        # 0: no Local ACK Timeout, so the connection RTO floor is the module's
        # min_rto_us, which the suite sets (MR-7.1.2 maps a longer timeout onto it).
        attr.timeout = 0
        attr.retry_cnt = num(a.get("retry_cnt", "7"))
        attr.rnr_retry = num(a.get("rnr_retry", "7"))
        gr = GlobalRoute(dgid=GID(mapped_gid(a["peer"])), sgid_index=h.gid_index, hop_limit=64)
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        self.qp.to_rts(attr)

    def close(self):
        self.qp.close()
        for m in list(self.local.values()) + list(self.recv.values()):
            m.close()
        self.cq.close()
        self.ch.close()


class Helper:
    def __init__(self, args):
        self.dev = args.dev
        self.ctx = d.Context(name=args.dev)
        self.pd = PD(self.ctx)
        self.gid_index = args.gid_index
        self.addr = args.addr
        self.conf = dict(FIXED)
        for kv in args.conf.split():
            k, v = kv.split("=", 1)
            if k not in SETUP:
                raise SystemExit("--conf: %s is no module parameter's key" % k)
            self.conf[k] = num(v)
        self.port = args.udp_port
        self.qps = {}
        self.newest = None
        self.mrs = {}         # rkey -> MR
        self.buffers = {}     # rkey -> the mmap an exact_va MR registers
        self.windows = {}     # rkey -> the memory window it names (access i)
        self.invalidated = set()    # keys a completion reported invalidated
        self.conf_checked = False   # _check_conf passed on a QP of this helper

    def qp(self, a):
        q = self.qps.get(num(a["qpn"]))
        if q is None:
            raise Err("no such qp")
        return q

    def mr(self, a):
        m = self.mrs.get(num(a["rkey"]))
        if m is None:
            raise Err("no such mr")
        return m

    # -- commands --------------------------------------------------------------------

    def c_hello(self, a):
        fixed = dict(self.conf, peer_paths=PEER_PATHS)
        return ("impl=rdma_metaroce-verbs addr=%s port=%d caps=mem,diag,paths,invalidate endian=%s tsn_bits=24 "
                "fixed=%s settable=%s setup=%s" % (
                    self.addr, self.port, sys.byteorder,
                    ",".join("%s:%d" % kv for kv in fixed.items()), ",".join(SETTABLE),
                    ",".join(SETUP)))

    def c_create_qp(self, a):
        q = Qp(self, a)
        self.qps[q.qpn] = q
        self.newest = q
        if not self.conf_checked:
            self._check_conf(q)
        return "qpn=%#x" % q.qpn

    def _qp_details(self, q):
        """The QP's driver attributes (`rdma -dd resource show qp`), name -> value."""
        r = subprocess.run(["rdma", "-dd", "resource", "show", "qp", "link", self.dev + "/1",
                            "lqpn", str(q.qpn)], capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise Err("rdma resource show qp: %s" % r.stderr.strip())
        return {m.group(1): int(m.group(2))
                for m in re.finditer(r"\b(?:drv_)?([a-z][a-z0-9_]*) (\d+)\b", r.stdout)}

    def _check_conf(self, q):
        """The values hello reported as fixed (FIXED, with --conf) are those the
        module's connection runs, as it reports them: a default changed in the
        module and not here would otherwise mislead every case that reads them."""
        have = self._qp_details(q)
        wrong = ["%s=%s (module: %s)" % (k, self.conf[k], have.get(attr))
                 for k, attr in MODULE_NAMES.items() if have.get(attr) != self.conf[k]]
        if wrong:
            raise Err("the helper's view of the module is wrong: " + " ".join(wrong))
        self.conf_checked = True

    def c_destroy_qp(self, a):
        q = self.qp(a)
        del self.qps[q.qpn]
        if self.newest is q:
            self.newest = None
        q.close()
        for k in q.mrs:
            self._drop_key(k)
        return ""

    def _drop_key(self, rkey):
        """Deregisters what key `rkey` names: a memory window first, then its MR."""
        w = self.windows.pop(rkey, None)
        if w is not None:
            w.close()
        m = self.mrs.pop(rkey, None)
        if m is not None:
            m.close()
        self.buffers.pop(rkey, None)

    def _bind_window(self, m, n, remote):
        """A type 2 memory window over MR `m` (n bytes from its start) with the
        remote rights `remote`, bound through the newest QP's send queue: the
        key SEND_INV may invalidate (MR-9.2.3; a process has no fast-registration
        MRs). Returns (window, its rkey)."""
        q = self.newest
        if q is None:
            raise Err("access i: no QP to bind the memory window through")
        w = MW(self.pd, e.IBV_MW_TYPE_2)
        bind = SendWR(wr_id=BIND_WR_ID, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
        bind.set_bind_wr(w, MWBindInfo(m, m.buf, n, remote))
        q.qp.post_send(bind)
        end = time.monotonic() + 10.0
        while True:
            wc = self._next_wc(q, end)
            if wc is None:
                w.close()
                raise Err("memory window bind did not complete")
            if wc.wr_id != BIND_WR_ID:
                q.held.append(wc)       # the case's, returned by its next poll
                continue
            if wc.status != 0:
                w.close()
                raise Err("memory window bind failed: status %d" % wc.status)
            return w, bind.rkey

    def c_reg_mr(self, a):
        acc = e.IBV_ACCESS_LOCAL_WRITE
        for ch in a.get("access", "rwa"):
            acc |= {"r": e.IBV_ACCESS_REMOTE_READ, "w": e.IBV_ACCESS_REMOTE_WRITE,
                    "a": e.IBV_ACCESS_REMOTE_ATOMIC, "g": e.IBV_ACCESS_FLUSH_GLOBAL,
                    "i": 0, "-": 0}.get(ch, -1)
            if ch not in "rwagi-":
                raise Err("access %r: only r, w, a, g, i" % ch)
        n = num(a["len"])
        va = num(a["va"])
        exact = a.get("exact_va") == "1"
        if "i" in a.get("access", ""):
            # Remotely invalidable: the key is a memory window's over an MR that
            # allows binding one.
            m = MR(self.pd, n, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
            try:
                w, rkey = self._bind_window(m, n, acc)
            except Exception:
                m.close()
                raise
            self.windows[rkey] = w
        elif exact:
            # The case needs the MR at `va` (e.g. near 2^64): a buffer of ours
            # registered with `va` as its I/O virtual address, which ib_core wants
            # at the same offset in its page as the buffer.
            off = va & (mmap.PAGESIZE - 1)
            buf = mmap.mmap(-1, (off + n + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf)) + off
            m = MREx(self.pd, n, acc, address=addr, iova=va)
            rkey = m.rkey
            self.buffers[rkey] = buf
        else:
            m = MR(self.pd, n, acc)
            rkey = m.rkey
        fill = num(a.get("fill", "0"))
        m.write(bytes([fill]) * n, n, 0)
        self.mrs[rkey] = m
        if self.newest is not None:
            self.newest.mrs.append(rkey)
        return "rkey=%#x va=%#x" % (rkey, va if exact else m.buf)

    def c_dereg_mr(self, a):
        self.mr(a)
        self._drop_key(num(a["rkey"]))
        return ""

    def c_mem_write(self, a):
        m = self.mr(a)
        data = bytes.fromhex(a.get("data", ""))
        off = num(a["off"])
        if off + len(data) > m.length:
            raise Err("out of bounds")
        m.write(data, len(data), off)
        return ""

    def c_mem_read(self, a):
        m = self.mr(a)
        off, n = num(a["off"]), num(a["len"])
        if off + n > m.length:
            raise Err("out of bounds")
        # valid: no completion reported the key invalidated (a memory window's
        # state is not otherwise visible through verbs).
        return "valid=%d data=%s" % (num(a["rkey"]) not in self.invalidated, m.read(n, off).hex())

    def c_post_recv(self, a):
        q = self.qp(a)
        wr, n = num(a["wr"]), num(a["len"])
        m = MR(self.pd, max(n, 8), e.IBV_ACCESS_LOCAL_WRITE)
        m.write(bytes(max(n, 8)), max(n, 8), 0)
        try:
            q.qp.post_recv(RecvWR(wr_id=wr, num_sge=1, sg=[SGE(m.buf, n, m.lkey)]))
        except PyverbsRDMAError as x:
            m.close()
            if x.error_code == errno.ENOMEM:
                raise Err("receive queue full (ENOMEM)")
            raise
        old = q.recv.pop(wr, None)
        if old is not None:
            old.close()
        q.recv[wr] = m
        return ""

    def c_post_send(self, a):
        q = self.qp(a)
        wr = num(a["wr"])
        op = a.get("op", "send")
        if op not in WR_OPCODES:
            raise Err("bad op %s" % op)
        n = num(a.get("len", "0"))
        if op in ("cas", "faa"):
            n = 8
        ll = num(a.get("local_len", str(max(n, 8))))
        if ll > 64 << 20:
            raise Err("local buffer too large")
        if "data" in a:
            data = bytes.fromhex(a["data"])
        else:
            data = bytes((i * 7 + wr) & 0xFF for i in range(ll))
        data = (data + bytes(ll))[:ll]
        m = MR(self.pd, ll, e.IBV_ACCESS_LOCAL_WRITE)
        m.write(data, ll, 0)
        flags = e.IBV_SEND_SIGNALED
        for f in a.get("flags", "signaled").split(","):
            if f == "unsignaled":
                flags &= ~e.IBV_SEND_SIGNALED
            elif f == "fence":
                flags |= e.IBV_SEND_FENCE
            elif f == "solicited":
                flags |= e.IBV_SEND_SOLICITED
            elif f not in ("signaled", ""):
                m.close()
                raise Err("bad flag %s" % f)
        w = SendWR(wr_id=wr, opcode=WR_OPCODES[op], num_sge=1, sg=[SGE(m.buf, n, m.lkey)],
                   send_flags=flags)
        if op in ("send_imm", "write_imm"):
            w.imm_data = socket.htonl(num(a.get("imm", "0")))     # __be32 in verbs
        if op == "send_inv":
            w.rkey = num(a.get("imm", "0"))
        if op in ("write", "write_imm", "read"):
            w.set_wr_rdma(num(a.get("rkey", "0")), num(a.get("va", "0")))
        if op == "cas":
            w.set_wr_atomic(num(a.get("rkey", "0")), num(a.get("va", "0")),
                            num(a.get("compare", "0")), num(a.get("swap", "0")))
        if op == "faa":
            w.set_wr_atomic(num(a.get("rkey", "0")), num(a.get("va", "0")),
                            num(a.get("add", "0")), 0)
        try:
            q.qp.post_send(w)
        except PyverbsRDMAError as x:
            m.close()
            raise Err("post_send: %s (errno %d)" % (os.strerror(x.error_code), x.error_code))
        old = q.local.pop(wr, None)
        if old is not None:
            old.close()
        q.local[wr] = m
        return ""

    def c_local_buf(self, a):
        m = self.qp(a).local.get(num(a["wr"]))
        if m is None:
            raise Err("no such buffer")
        return "data=%s" % m.read(m.length, 0).hex()

    def c_recv_buf(self, a):
        m = self.qp(a).recv.get(num(a["wr"]))
        if m is None:
            raise Err("no such buffer")
        return "data=%s" % m.read(m.length, 0).hex()

    def _poll(self, q, maxn):
        out = []
        while len(out) < maxn:
            if q.held:
                k, wcs = 1, [q.held.pop(0)]
            else:
                k, wcs = q.cq.poll(min(16, maxn - len(out)))
            if k <= 0:
                break
            for w in wcs[:k]:
                # A flushed or failed receive has no defined opcode.
                op = WC_OPCODES.get(w.opcode, "recv") if w.status == 0 or \
                    w.opcode in WC_OPCODES else "recv"
                imm = "%#x" % socket.ntohl(w.imm_data) if w.wc_flags & e.IBV_WC_WITH_IMM else "-"
                # ibv_wc's invalidated_rkey shares imm_data's place (host order).
                inv = "%#x" % w.imm_data if w.wc_flags & e.IBV_WC_WITH_INV else "-"
                if w.wc_flags & e.IBV_WC_WITH_INV:
                    self.invalidated.add(w.imm_data)
                # ibv_wc carries no solicited flag: reported as "-" (no "solicited" cap).
                out.append("%d,%d,%s,%d,%s,%s,-" % (w.wr_id, w.status, op, w.byte_len, imm, inv))
        return out

    def c_poll_cq(self, a):
        q = self.qp(a)
        out = self._poll(q, num(a.get("max", "1024")))
        return "n=%d cqes=%s" % (len(out), ";".join(out))

    def _next_wc(self, q, end):
        """The next completion of q's CQ (a raw WC), waiting for its completion
        channel's event until `end`; None if none came."""
        while True:
            k, wcs = q.cq.poll(1)
            if k <= 0:
                q.cq.req_notify()
                k, wcs = q.cq.poll(1)       # one that raced the arming
            if k > 0:
                return wcs[0]
            left = end - time.monotonic()
            if left <= 0:
                return None
            if select.select([q.ch.fd], [], [], left)[0]:
                q.ch.get_cq_event(q.cq)
                q.cq.ack_events(1)

    def c_wait_cq(self, a):
        q = self.qp(a)
        n = num(a.get("n", "1"))
        end = time.monotonic() + min(num(a.get("timeout_ms", "1000")), 30000) / 1000.0
        out = self._poll(q, n)
        while len(out) < n:
            wc = self._next_wc(q, end)
            if wc is None:
                break
            q.held.append(wc)
            out += self._poll(q, n - len(out))
        return "n=%d cqes=%s" % (len(out), ";".join(out))

    def c_set_error(self, a):
        q = self.qp(a)
        q.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        return ""

    def c_paths(self, a):
        """The QP's paths as the module reports them (`rdma -dd resource show qp`:
        its driver attributes path<i>_status, _port, _cwnd, _inflight, _srtt_ns,
        _gen), in dut.py's form."""
        rows = {}
        for name, v in self._qp_details(self.qp(a)).items():
            m = re.fullmatch(r"path(\d+)_([a-z_]+)", name)
            if m:
                rows.setdefault(int(m.group(1)), {})[m.group(2)] = v
        out = []
        for i in sorted(rows):
            p = rows[i]
            try:
                out.append("%d,%s,%d,%d,%d,%d,%d" % (
                    i, PATH_STATUS[p["status"]], p["port"], p["cwnd"], p["inflight"],
                    p["srtt_ns"], p["gen"]))
            except KeyError as k:
                raise Err("path %d: no %s in %r" % (i, k, p))
        if len(out) != self.conf["paths"]:
            raise Err("%d paths reported, the module runs %d" % (len(out), self.conf["paths"]))
        return "paths=%s" % ";".join(out)

    def c_diag(self, a):
        """The device's counters (`rdma statistic`), for failure reports."""
        r = subprocess.run(["rdma", "statistic", "show", "link", self.dev + "/1"],
                           capture_output=True, text=True, timeout=10)
        w = r.stdout.split()[2:]
        return " ".join("%s=%s" % (k, v) for k, v in zip(w[::2], w[1::2]))

    def c_quit(self, a):
        raise SystemExit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--gid-index", type=int, required=True)
    ap.add_argument("--addr", required=True, help="the DUT's IPv4 address (its RoCE v2 GID)")
    # The module's parameters as loaded (it does not show them in sysfs).
    ap.add_argument("--udp-port", type=int, default=4792)
    ap.add_argument("--conf", default="",
                    help="the module's other parameters as loaded, as create_qp keys "
                    "('paths=4 target_qdelay_us=1000 ...'; keys of SETUP)")
    h = Helper(ap.parse_args())
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        args = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        fn = getattr(h, "c_" + words[0], None)
        try:
            if fn is None:
                raise Err("unsupported")
            r = fn(args)
            out.write(("ok " + r if r else "ok") + "\n")
        except SystemExit:
            out.write("ok bye\n")
            out.flush()
            return
        except (Err, KeyError, ValueError, PyverbsError) as x:
            out.write("err %s: %s\n" % (type(x).__name__, str(x).replace("\n", " ")))
        out.flush()


if __name__ == "__main__":
    main()
