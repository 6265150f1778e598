# SPDX-License-Identifier: GPL-2.0
"""Device-under-test control.

The suite talks to the DUT's *control helper* with one text line per
command and one reply line per command (``ok key=value ...`` or
``err message``). The userspace target's helper is the reference endpoint
itself (``proto-endpoint``); the kernel target's helper is ``dut_verbs.py``,
a pyverbs program speaking the same lines inside the DUT's namespace
(create_qp -> ibv_create_qp + ibv_modify_qp to RTS with the peer's QPN and
the given PSNs, reg_mr -> ibv_reg_mr, post_* -> ibv_post_*, wait_cq ->
ibv_poll_cq, mem_read -> memcpy from the MR). Commands a helper cannot implement are answered
``err unsupported``; the ``hello`` reply lists capabilities (``caps=``),
and cases that need a missing capability SKIP.

A helper for a device that allocates its own identifiers answers
``create_qp`` with ``qpn=`` and ``reg_mr`` with ``rkey=`` and ``va=``; the
suite then uses those instead of the ones it proposed. A helper without
per-QP configuration (no ``config`` capability) reports in ``hello`` the
values it runs with (``fixed=key:value,...``, same keys as create_qp), the
create_qp keys it does set (``settable=``), the keys a set-up of the whole
DUT can change (``setup=``; kernel target: module parameters) and the width
of its TSNs (``tsn_bits=``, default 32); ``lib.effective_conf`` skips cases
needing other values, and the suite runs those that need other values of
``setup=`` keys again at the end, on a DUT set up for them (``--dut-setup``). Capabilities: events, counters, mem, paths, config, connect,
invalidate (remote invalidation, SEND_INV), solicited (completions report
the SOLICITED flag).

Commands (numbers decimal or 0x-hex; data hex):

  hello       -> ok caps=... endian= [fixed= settable= setup= tsn_bits=]
  create_qp qpn= peer_qpn= tsn= peer_tsn= peer=IP peer_port= paths= mtu=
            [peer_paths= (the peer's path count, MR-7.1.4; default: paths=)
             ack_delay_us= initial_rtt_us= min_path_rto_us= min_rto_us=
             max_rto_us= retry_cnt= rnr_retry= rnr_timer= ack_every=
             init_window= max_window= target_qdelay_us= ai= beta_q16=
             max_mdf_q16= ecn_g_shift= credit= port_base=]
            -> ok [qpn=]
  destroy_qp qpn=
  reg_mr rkey= va= len= access=[rwai-] [fill=] [exact_va=1]     dereg_mr rkey=
            -> ok [rkey= va=]
            (exact_va=1: the case needs the MR at va; a helper that registers
            real buffers registers this one with va as its I/O virtual address)
  mem_write rkey= off= data=                       mem_read rkey= off= len=
  post_recv qpn= wr= len=
  post_send qpn= wr= op=send|send_imm|send_inv|write|write_imm|read|cas|faa
            len= va= rkey= imm= compare= swap= add= flags=signaled,fence,... data=
  local_buf qpn= wr=          recv_buf qpn= wr=
  poll_cq qpn= [max=]         wait_cq qpn= n= timeout_ms=
      -> ok n=K cqes=wr,status,opcode,byte_len,imm,inv_rkey,solicited;...
  counters [qpn=]   paths qpn=   events   set_error qpn=   set_credit qpn= bytes=
  quit
"""

import os
import select
import subprocess
import time


class DutError(Exception):
    pass


class Skip(Exception):
    pass


class NeedsSetup(Skip):
    """Skipped because the DUT's fixed configuration is not the case's, in keys
    its set-up can change (``setup=``); the suite may run the case again on a
    DUT set up with `conf` (create_qp keys and values)."""

    def __init__(self, conf, msg):
        super().__init__(msg)
        self.conf = conf


def parse_reply(line):
    line = line.strip()
    if line.startswith("err"):
        raise DutError(line[4:])
    if not line.startswith("ok"):
        raise DutError("bad reply %r" % line)
    out = {}
    for w in line.split()[1:]:
        if "=" in w:
            k, v = w.split("=", 1)
            out[k] = v
    return out


class LineDut:
    """A DUT helper reached through a pipe (stdin/stdout)."""

    def __init__(self, argv, env=None, stderr=None, start_timeout=10.0):
        self.argv = argv
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=stderr, env=env)
        self.buf = b""
        self.wait_scale = 1.0       # see lib.Tester
        ready = self._line(start_timeout)
        if not ready.startswith("ready"):
            raise DutError("helper did not start: %r" % ready)
        self.info = self.cmd("hello")
        self.caps = set(self.info.get("caps", "").split(","))
        # A DUT without per-QP configuration reports its fixed values and the
        # create_qp keys it does set (kernel target: the verbs attributes).
        self.fixed = {k: int(v, 0) for k, v in
                      (kv.split(":", 1) for kv in self.info.get("fixed", "").split(",") if kv)}
        self.settable = set(self.info.get("settable", "").split(",")) - {""}
        # ... and the keys whose fixed value a set-up of the whole DUT changes
        # (kernel target: module parameters).
        self.setup = set(self.info.get("setup", "").split(",")) - {""}
        self.tsn_bits = int(self.info.get("tsn_bits", "32"))
        self.endian = "<" if self.info.get("endian", "little") == "little" else ">"

    def _line(self, timeout):
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise DutError("helper reply timeout")
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if not r:
                continue
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                raise DutError("helper exited (rc=%s)" % self.p.poll())
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        line = line.decode(errors="replace")
        if not line.startswith(("ok", "err", "ready")):
            return self._line(max(0.01, end - time.monotonic()))   # stray output
        return line

    def cmd(self, line, timeout=10.0):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()
        return parse_reply(self._line(timeout))

    def has(self, cap):
        return cap in self.caps

    def close(self):
        try:
            self.cmd("quit", timeout=2.0)
        except Exception:
            pass
        try:
            self.p.stdin.close()
        except Exception:
            pass
        try:
            self.p.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()

    # Convenience wrappers -------------------------------------------------

    def wait_cq(self, qpn, n=1, timeout_ms=1000):
        timeout_ms = int(timeout_ms * self.wait_scale)
        r = self.cmd("wait_cq qpn=%#x n=%d timeout_ms=%d" % (qpn, n, timeout_ms),
                     timeout=timeout_ms / 1000.0 + 5)
        return parse_cqes(r.get("cqes", ""))

    def poll_cq(self, qpn):
        return parse_cqes(self.cmd("poll_cq qpn=%#x" % qpn).get("cqes", ""))

    def mem_read(self, rkey, off, n):
        return bytes.fromhex(self.cmd("mem_read rkey=%#x off=%d len=%d" % (rkey, off, n))["data"])

    def counters(self, qpn=None):
        r = self.cmd("counters" + ("" if qpn is None else " qpn=%#x" % qpn))
        return {k: (int(v) if v.isdigit() else v) for k, v in r.items()}

    def paths(self, qpn):
        out = []
        for e in self.cmd("paths qpn=%#x" % qpn)["paths"].split(";"):
            i, st, port, cwnd, infl, srtt, gen = e.split(",")
            out.append(dict(path=int(i), status=st, port=int(port), cwnd=int(cwnd),
                            inflight=int(infl), srtt_ns=int(srtt), gen=int(gen)))
        return out

    def events(self):
        ev = self.cmd("events").get("ev", "")
        return [e.split(",") for e in ev.split(";") if e]


def parse_cqes(s):
    out = []
    for e in s.split(";"):
        if not e:
            continue
        wr, st, op, ln, imm, inv, sol = e.split(",")
        out.append(dict(wr=int(wr), status=int(st), opcode=op, len=int(ln),
                        imm=None if imm == "-" else int(imm, 16),
                        inv=None if inv == "-" else int(inv, 16), solicited=sol == "1"))
    return out


# ib_wc_status (MR-7.4.1)
WC_SUCCESS, WC_LOC_LEN_ERR, WC_LOC_QP_OP_ERR, WC_LOC_PROT_ERR, WC_WR_FLUSH_ERR = 0, 1, 2, 4, 5
WC_REM_INV_REQ_ERR, WC_REM_ACCESS_ERR, WC_REM_OP_ERR = 9, 10, 11
WC_RETRY_EXC_ERR, WC_RNR_RETRY_EXC_ERR = 12, 13
