//! metaroce-endpoint: a host userspace MetaRoCE endpoint built from the
//! sans-IO protocol core (`../proto`), for the compliance suite
//! (`selftests/compliance/`).
//!
//! It binds one UDP socket (the MetaRoCE port) on a local address, keeps
//! RC connections keyed by local QPN, an in-memory MR table and per-QP
//! local/receive buffers, and is configured through a line-based control
//! channel on stdin/stdout (one command per line, one reply per line;
//! the protocol is described in `README.md` and is small enough for a
//! verbs helper on a kernel target to speak it too).
//!
//! Safety: it only ever sends to loopback (127.0.0.0/8) or the benchmark
//! range 198.18.0.0/15; any other address is refused.

use metaroce_proto::{
    AtomicOp, CcConfig, Completion, Config, Connection, Duration, Ecn, Flush, Instant, LocalMemory,
    MemError, PathStatus, QpState, RecvWr, Responder, SendWr, WcOpcode, WcStatus, WrOpcode,
    WR_FENCE, WR_SIGNALED, WR_SOLICITED,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::unix::io::AsRawFd;

const ACC_READ: u8 = 1;
const ACC_WRITE: u8 = 2;
const ACC_ATOMIC: u8 = 4;
const ACC_INVALIDATE: u8 = 8;
/// `IBV_ACCESS_FLUSH_GLOBAL` (MR-4.4.7; this memory is never persistent).
const ACC_FLUSH_GLOBAL: u8 = 16;

fn allowed_addr(a: Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 127 || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
}

struct Mr {
    base: u64,
    access: u8,
    valid: bool,
    bytes: Vec<u8>,
}

impl Mr {
    fn range(&self, va: u64, len: usize, need: u8) -> Result<std::ops::Range<usize>, MemError> {
        if !self.valid || self.access & need != need {
            return Err(MemError::Access);
        }
        let off = va.checked_sub(self.base).ok_or(MemError::Access)?;
        let end = off.checked_add(len as u64).ok_or(MemError::Access)?;
        if end > self.bytes.len() as u64 {
            return Err(MemError::Access);
        }
        Ok(off as usize..end as usize)
    }
}

#[derive(Default)]
struct QpBufs {
    local: HashMap<u64, Vec<u8>>,
    recv: HashMap<u64, Vec<u8>>,
}

/// The memory seen by one connection during one core call.
struct MemView<'a> {
    qpn: u32,
    mrs: &'a mut BTreeMap<u32, Mr>,
    bufs: &'a mut QpBufs,
    events: &'a mut Vec<String>,
}

impl Responder for MemView<'_> {
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        let mr = self.mrs.get_mut(&rkey).ok_or(MemError::Access)?;
        let r = mr.range(va, data.len(), ACC_WRITE)?;
        mr.bytes[r].copy_from_slice(data);
        self.events
            .push(format!("W,{:#x},{:#x},{:#x},{}", self.qpn, rkey, va, data.len()));
        Ok(())
    }
    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        let mr = self.mrs.get_mut(&rkey).ok_or(MemError::Access)?;
        let r = mr.range(va, out.len(), ACC_READ)?;
        out.copy_from_slice(&mr.bytes[r]);
        Ok(())
    }
    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let mr = self.mrs.get_mut(&rkey).ok_or(MemError::Access)?;
        let r = mr.range(va, 8, ACC_ATOMIC)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&mr.bytes[r.clone()]);
        let old = u64::from_ne_bytes(b);
        let new = match op {
            AtomicOp::Cas { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::Faa { add } => old.wrapping_add(add),
        };
        mr.bytes[r].copy_from_slice(&new.to_ne_bytes());
        self.events
            .push(format!("A,{:#x},{:#x},{:#x},8", self.qpn, rkey, va));
        Ok(old)
    }
    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        let b = self.bufs.recv.get_mut(&wr_id).ok_or(MemError::Access)?;
        let s = offset as usize;
        let e = s.checked_add(data.len()).ok_or(MemError::Access)?;
        b.get_mut(s..e).ok_or(MemError::Access)?.copy_from_slice(data);
        self.events
            .push(format!("R,{:#x},{},{:#x},{}", self.qpn, wr_id, offset, data.len()));
        Ok(())
    }
    fn flush_remote(&mut self, rkey: u32, va: u64, len: u32, what: Flush) -> Result<(), MemError> {
        // Plain process memory: global visibility with the right, never persistence.
        let mr = self.mrs.get(&rkey).ok_or(MemError::Access)?;
        if what.persistent || !what.global {
            return Err(MemError::Access);
        }
        if what.whole_region {
            mr.range(mr.base, 0, ACC_FLUSH_GLOBAL)?;
        } else {
            mr.range(va, len as usize, ACC_FLUSH_GLOBAL)?;
        }
        self.events
            .push(format!("F,{:#x},{:#x},{:#x},{}", self.qpn, rkey, va, len));
        Ok(())
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        let mr = self.mrs.get_mut(&rkey).ok_or(MemError::Operation)?;
        if mr.access & ACC_INVALIDATE == 0 || !mr.valid {
            return Err(MemError::Operation);
        }
        mr.valid = false;
        Ok(())
    }
}

impl LocalMemory for MemView<'_> {
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError> {
        let b = self.bufs.local.get(&wr_id).ok_or(MemError::Access)?;
        let s = offset as usize;
        let e = s.checked_add(out.len()).ok_or(MemError::Access)?;
        out.copy_from_slice(b.get(s..e).ok_or(MemError::Access)?);
        Ok(())
    }
    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        let b = self.bufs.local.get_mut(&wr_id).ok_or(MemError::Access)?;
        let s = offset as usize;
        let e = s.checked_add(data.len()).ok_or(MemError::Access)?;
        b.get_mut(s..e).ok_or(MemError::Access)?.copy_from_slice(data);
        Ok(())
    }
}

struct Qp {
    conn: Box<Connection>,
    bufs: QpBufs,
    peer: SocketAddrV4,
    cq: VecDeque<Completion>,
}

struct Waiter {
    qpn: u32,
    n: usize,
    deadline: u64,
}

struct Endpoint {
    start: std::time::Instant,
    local_ip: Ipv4Addr,
    port: u16,
    sock: UdpSocket,
    tx_socks: HashMap<u16, (UdpSocket, u8)>,
    qps: BTreeMap<u32, Qp>,
    mrs: BTreeMap<u32, Mr>,
    events: Vec<String>,
    ctr: BTreeMap<&'static str, u64>,
    waiter: Option<Waiter>,
    pending: VecDeque<String>,
    out: std::io::Stdout,
    quit: bool,
}

fn parse_num(s: &str) -> Result<u64, String> {
    let r = if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
    } else {
        s.parse::<u64>()
    };
    r.map_err(|_| format!("bad number {s:?}"))
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err("odd hex".into());
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| "bad hex".to_string()))
        .collect()
}

struct Args<'a>(HashMap<&'a str, &'a str>);

impl<'a> Args<'a> {
    fn parse(words: &[&'a str]) -> Self {
        Args(words.iter().filter_map(|w| w.split_once('=')).collect())
    }
    fn num(&self, k: &str) -> Result<u64, String> {
        parse_num(self.0.get(k).ok_or(format!("missing {k}"))?)
    }
    fn num_or(&self, k: &str, d: u64) -> Result<u64, String> {
        match self.0.get(k) {
            Some(v) => parse_num(v),
            None => Ok(d),
        }
    }
    fn str_or(&self, k: &str, d: &'a str) -> &'a str {
        self.0.get(k).copied().unwrap_or(d)
    }
}

fn status_name(s: WcStatus) -> u32 {
    s.ib_wc_status()
}

fn opcode_name(o: WcOpcode) -> &'static str {
    match o {
        WcOpcode::Send => "send",
        WcOpcode::RdmaWrite => "write",
        WcOpcode::RdmaRead => "read",
        WcOpcode::CompSwap => "cas",
        WcOpcode::FetchAdd => "faa",
        WcOpcode::Recv => "recv",
        WcOpcode::RecvRdmaWithImm => "recv_imm",
        WcOpcode::RegMr => "reg_mr",
        WcOpcode::LocalInv => "local_inv",
        WcOpcode::BindMw => "bind_mw",
        WcOpcode::AtomicWrite => "atomic_write",
        WcOpcode::Flush => "flush",
    }
}

fn fmt_cqe(c: &Completion) -> String {
    format!(
        "{},{},{},{},{},{},{}",
        c.wr_id,
        status_name(c.status),
        opcode_name(c.opcode),
        c.byte_len,
        c.imm.map(|v| format!("{v:#x}")).unwrap_or_else(|| "-".into()),
        c.invalidated_rkey
            .map(|v| format!("{v:#x}"))
            .unwrap_or_else(|| "-".into()),
        c.solicited as u8
    )
}

impl Endpoint {
    fn now(&self) -> u64 {
        // Offset by one second so that no core timestamp is ever zero.
        self.start.elapsed().as_nanos() as u64 + 1_000_000_000
    }

    fn bump(&mut self, k: &'static str) {
        *self.ctr.entry(k).or_insert(0) += 1;
    }

    fn reply(&mut self, s: &str) {
        let _ = writeln!(self.out, "{s}");
        let _ = self.out.flush();
    }

    fn send_from(&mut self, src_port: u16, ecn: Ecn, peer: SocketAddrV4, bytes: &[u8]) {
        let tos: u8 = match ecn {
            Ecn::Ect0 => 2,
            Ecn::NotEct => 0,
        };
        if !self.tx_socks.contains_key(&src_port) {
            if self.tx_socks.len() >= 256 {
                self.tx_socks.clear();
            }
            match UdpSocket::bind(SocketAddrV4::new(self.local_ip, src_port)) {
                Ok(s) => {
                    self.tx_socks.insert(src_port, (s, 0xff));
                }
                Err(_) => {
                    self.bump("ep_tx_port_fallback");
                    let _ = self.sock.send_to(bytes, peer);
                    return;
                }
            }
        }
        let (s, cur) = self.tx_socks.get_mut(&src_port).unwrap();
        if *cur != tos {
            let v: libc::c_int = tos as libc::c_int;
            // SAFETY: plain setsockopt on an owned socket with a c_int value.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_TOS,
                    &v as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            *cur = tos;
        }
        let _ = s.send_to(bytes, peer);
        self.bump("ep_tx");
    }

    /// Runs timers, transmits and collects completions of every QP.
    fn pump(&mut self) {
        let qpns: Vec<u32> = self.qps.keys().copied().collect();
        for qpn in qpns {
            // Exactly the buffer size the core asks for, as a driver would use.
            let mut buf = vec![0u8; self.qps[&qpn].conn.max_packet_len()];
            let now = self.now();
            let mut out: Vec<(u16, Ecn, Vec<u8>)> = Vec::new();
            let peer;
            {
                let qp = self.qps.get_mut(&qpn).unwrap();
                peer = qp.peer;
                if let Some(t) = qp.conn.poll_timeout() {
                    if t.0 <= now {
                        qp.conn.handle_timeout(Instant(now));
                    }
                }
                let mut mem = MemView {
                    qpn,
                    mrs: &mut self.mrs,
                    bufs: &mut qp.bufs,
                    events: &mut self.events,
                };
                let mut guard = 0;
                while let Some(t) = qp.conn.poll_transmit(Instant(now), &mut buf, &mut mem) {
                    out.push((t.src_port, t.ecn, buf[..t.len].to_vec()));
                    guard += 1;
                    if guard > 4096 {
                        break;
                    }
                }
                while let Some(c) = qp.conn.poll_completion() {
                    self.events.push(format!(
                        "C,{:#x},{},{}",
                        qpn,
                        c.wr_id,
                        status_name(c.status)
                    ));
                    qp.cq.push_back(c);
                }
            }
            for (port, ecn, bytes) in out {
                self.send_from(port, ecn, peer, &bytes);
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        for qp in self.qps.values() {
            if let Some(i) = qp.conn.poll_timeout() {
                t = Some(t.map_or(i.0, |x| x.min(i.0)));
            }
        }
        if let Some(w) = &self.waiter {
            t = Some(t.map_or(w.deadline, |x| x.min(w.deadline)));
        }
        t
    }

    fn on_datagram(&mut self, src: SocketAddrV4, ce: bool, bytes: &[u8]) {
        self.bump("ep_rx");
        if bytes.len() < 8 {
            self.bump("ep_rx_short");
            return;
        }
        let qpn = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]);
        let now = self.now();
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.bump("ep_rx_unknown_qpn");
            return;
        };
        let _ = src;
        let mut mem = MemView {
            qpn,
            mrs: &mut self.mrs,
            bufs: &mut qp.bufs,
            events: &mut self.events,
        };
        qp.conn
            .handle_datagram(Instant(now), src.port(), ce, bytes, &mut mem);
    }

    fn try_waiter(&mut self, force: bool) -> bool {
        let Some(w) = &self.waiter else { return false };
        let (qpn, n, deadline) = (w.qpn, w.n, w.deadline);
        let have = self.qps.get(&qpn).map(|q| q.cq.len()).unwrap_or(0);
        if have >= n || force || self.now() >= deadline {
            self.waiter = None;
            let r = self.take_cq(qpn, n);
            self.reply(&r);
            return true;
        }
        false
    }

    fn take_cq(&mut self, qpn: u32, max: usize) -> String {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return "err no such qp".into();
        };
        let mut v = Vec::new();
        while v.len() < max {
            match qp.cq.pop_front() {
                Some(c) => v.push(fmt_cqe(&c)),
                None => break,
            }
        }
        format!("ok n={} cqes={}", v.len(), v.join(";"))
    }

    fn command(&mut self, line: &str) -> Result<Option<String>, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(cmd) = words.first() else {
            return Ok(None);
        };
        let a = Args::parse(&words[1..]);
        let r = match *cmd {
            "hello" => format!(
                "ok impl=metaroce-endpoint addr={} port={} caps=events,counters,mem,paths,config,connect,invalidate,solicited endian={}",
                self.local_ip,
                self.port,
                if cfg!(target_endian = "little") { "little" } else { "big" }
            ),
            "create_qp" => {
                let qpn = a.num("qpn")? as u32 & 0xff_ffff;
                let mut c = Config::new(
                    qpn,
                    a.num("peer_qpn")? as u32,
                    a.num("tsn")? as u32,
                    a.num("peer_tsn")? as u32,
                );
                let us = |k: &str, d: Duration| -> Result<Duration, String> {
                    Ok(match a.0.get(k) {
                        Some(v) => Duration::from_micros(parse_num(v)?),
                        None => d,
                    })
                };
                c.mtu = a.num_or("mtu", c.mtu as u64)? as u32;
                c.num_paths = a.num_or("paths", c.num_paths as u64)? as u8;
                // MR-7.1.4: the peer's advertised path count bounds the path
                // ids we accept on data (0: same as ours).
                c.peer_num_paths = a.num_or("peer_paths", c.peer_num_paths as u64)? as u8;
                c.src_port_base = a.num_or("port_base", c.src_port_base as u64)? as u16;
                c.retry_cnt = a.num_or("retry_cnt", c.retry_cnt as u64)? as u8;
                c.rnr_retry = a.num_or("rnr_retry", c.rnr_retry as u64)? as u8;
                c.min_rnr_timer = a.num_or("rnr_timer", c.min_rnr_timer as u64)? as u8;
                c.ack_every = a.num_or("ack_every", c.ack_every as u64)? as u8;
                c.max_rd_atomic = a.num_or("max_rd_atomic", c.max_rd_atomic as u64)? as _;
                c.ack_delay = us("ack_delay_us", c.ack_delay)?;
                c.initial_rtt = us("initial_rtt_us", c.initial_rtt)?;
                c.min_path_rto = us("min_path_rto_us", c.min_path_rto)?;
                c.min_rto = us("min_rto_us", c.min_rto)?;
                c.max_rto = us("max_rto_us", c.max_rto)?;
                let d = CcConfig::default();
                c.cc.init_window = a.num_or("init_window", d.init_window as u64)? as u32;
                c.cc.max_window = a.num_or("max_window", d.max_window as u64)? as u32;
                c.cc.target_qdelay_ns =
                    a.num_or("target_qdelay_us", (d.target_qdelay_ns / 1000) as u64)? as u32 * 1000;
                c.cc.ai_bytes = a.num_or("ai", d.ai_bytes as u64)? as u32;
                c.cc.beta_q16 = a.num_or("beta_q16", d.beta_q16 as u64)? as u32;
                c.cc.max_mdf_q16 = a.num_or("max_mdf_q16", d.max_mdf_q16 as u64)? as u32;
                c.cc.ecn_gain_shift = a.num_or("ecn_g_shift", d.ecn_gain_shift as u64)? as u8;
                // MR-4.6: a UC QP.
                c.uc = a.num_or("uc", 0)? != 0;
                let ip: Ipv4Addr = a
                    .str_or("peer", "127.0.0.1")
                    .parse()
                    .map_err(|_| "bad peer address")?;
                if !allowed_addr(ip) {
                    return Err("peer address not on this machine (127/8, 198.18/15 only)".into());
                }
                let pport = a.num_or("peer_port", self.port as u64)? as u16;
                let mut conn = Box::new(Connection::new(c));
                if let Some(cr) = a.0.get("credit") {
                    conn.set_credit_hint(Some(parse_num(cr)? as u32));
                }
                self.qps.insert(
                    qpn,
                    Qp {
                        conn,
                        bufs: QpBufs::default(),
                        peer: SocketAddrV4::new(ip, pport),
                        cq: VecDeque::new(),
                    },
                );
                "ok".into()
            }
            "connect" => {
                // MR-7.1.3/7.1.4: take the peer's 24-byte parameter block,
                // agree on MTU, create the QP and answer with our own block.
                use metaroce_proto::wire::{ConnParams, ParamsBlock};
                let blk = unhex(a.str_or("params", ""))?;
                let peer = ConnParams::parse(&ParamsBlock::new_unchecked(&blk[..]))
                    .map_err(|e| format!("rejected parameter block: {e:?}"))?;
                let qpn = a.num("qpn")? as u32 & 0xff_ffff;
                let tsn = a.num("tsn")? as u32;
                let paths = a.num_or("paths", 4)? as u8;
                let mtu = a.num_or("mtu", 4096)? as u16;
                let ours = ConnParams {
                    version: 1,
                    paths,
                    qpn,
                    initial_tsn: tsn,
                    mtu,
                    udp_port: self.port,
                    max_rd_atomic: 16,
                    flags: 0,
                };
                let (agreed_mtu, rd) = ConnParams::agree(&ours, &peer);
                let mut line = format!(
                    "create_qp qpn={qpn} peer_qpn={} tsn={tsn} peer_tsn={} peer_port={} paths={paths} peer_paths={} mtu={agreed_mtu} max_rd_atomic={rd}",
                    peer.qpn, peer.initial_tsn, peer.udp_port, peer.paths
                );
                for w in &words[1..] {
                    if let Some((k, _)) = w.split_once('=') {
                        if !matches!(k, "params" | "qpn" | "tsn" | "paths" | "peer_paths" | "mtu" | "peer_qpn" | "peer_tsn" | "peer_port" | "max_rd_atomic") {
                            line.push(' ');
                            line.push_str(w);
                        }
                    }
                }
                match self.command(&line)? {
                    Some(r) if r.starts_with("ok") => {}
                    Some(r) => return Err(r),
                    None => return Err("create failed".into()),
                }
                let mut out = vec![0u8; ConnParams::LEN];
                ours.emit(&mut ParamsBlock::new_unchecked(&mut out[..]))
                    .map_err(|e| format!("{e:?}"))?;
                format!("ok params={} mtu={agreed_mtu}", hex(&out))
            }
            "destroy_qp" => {
                let qpn = a.num("qpn")? as u32;
                // Spec: MR-5.4.7 — the last word goes out before the QP does.
                self.qps.get_mut(&qpn).ok_or("no such qp")?.conn.close();
                self.pump();
                self.qps.remove(&qpn);
                "ok".into()
            }
            "reg_mr" => {
                let rkey = a.num("rkey")? as u32;
                let len = a.num("len")? as usize;
                if len > 64 << 20 {
                    return Err("mr too large".into());
                }
                let mut access = 0;
                for ch in a.str_or("access", "rwa").chars() {
                    access |= match ch {
                        'r' => ACC_READ,
                        'w' => ACC_WRITE,
                        'a' => ACC_ATOMIC,
                        'i' => ACC_INVALIDATE,
                        'g' => ACC_FLUSH_GLOBAL,
                        '-' => 0,
                        _ => return Err("bad access".into()),
                    };
                }
                let fill = a.num_or("fill", 0)? as u8;
                self.mrs.insert(
                    rkey,
                    Mr {
                        base: a.num("va")?,
                        access,
                        valid: true,
                        bytes: vec![fill; len],
                    },
                );
                "ok".into()
            }
            "dereg_mr" => {
                self.mrs.remove(&(a.num("rkey")? as u32)).ok_or("no such mr")?;
                "ok".into()
            }
            "mem_write" | "mem_read" => {
                let mr = self
                    .mrs
                    .get_mut(&(a.num("rkey")? as u32))
                    .ok_or("no such mr")?;
                let off = a.num("off")? as usize;
                if *cmd == "mem_write" {
                    let d = unhex(a.str_or("data", ""))?;
                    mr.bytes
                        .get_mut(off..off + d.len())
                        .ok_or("out of bounds")?
                        .copy_from_slice(&d);
                    "ok".into()
                } else {
                    let len = a.num("len")? as usize;
                    format!(
                        "ok valid={} data={}",
                        mr.valid as u8,
                        hex(mr.bytes.get(off..off + len).ok_or("out of bounds")?)
                    )
                }
            }
            "post_recv" => {
                let qpn = a.num("qpn")? as u32;
                let qp = self.qps.get_mut(&qpn).ok_or("no such qp")?;
                let wr = a.num("wr")?;
                let len = a.num("len")? as u32;
                qp.conn
                    .post_recv(RecvWr { wr_id: wr, len })
                    .map_err(|e| format!("post_recv: {e:?}"))?;
                qp.bufs.recv.insert(wr, vec![0; len as usize]);
                "ok".into()
            }
            "post_send" => {
                let qpn = a.num("qpn")? as u32;
                let qp = self.qps.get_mut(&qpn).ok_or("no such qp")?;
                let wr_id = a.num("wr")?;
                let len = a.num_or("len", 0)? as u32;
                let va = a.num_or("va", 0)?;
                let rkey = a.num_or("rkey", 0)? as u32;
                let imm = a.num_or("imm", 0)? as u32;
                let mut wr = match a.str_or("op", "send") {
                    "send" => SendWr::send(wr_id, len),
                    "send_imm" => SendWr::send_imm(wr_id, len, imm),
                    "send_inv" => SendWr {
                        opcode: WrOpcode::SendInv,
                        imm,
                        ..SendWr::send(wr_id, len)
                    },
                    "write" => SendWr::write(wr_id, len, va, rkey),
                    "write_imm" => SendWr::write_imm(wr_id, len, va, rkey, imm),
                    "read" => SendWr::read(wr_id, len, va, rkey),
                    "cas" => SendWr::cas(
                        wr_id,
                        va,
                        rkey,
                        a.num_or("compare", 0)?,
                        a.num_or("swap", 0)?,
                    ),
                    "faa" => SendWr::faa(wr_id, va, rkey, a.num_or("add", 0)?),
                    "atomic_write" => SendWr::atomic_write(wr_id, va, rkey),
                    o => return Err(format!("bad op {o}")),
                };
                let mut flags = WR_SIGNALED;
                for f in a.str_or("flags", "signaled").split(',') {
                    match f {
                        "signaled" => {}
                        "unsignaled" => flags &= !WR_SIGNALED,
                        "fence" => flags |= WR_FENCE,
                        "solicited" => flags |= WR_SOLICITED,
                        "" => {}
                        _ => return Err(format!("bad flag {f}")),
                    }
                }
                wr = wr.with_flags(flags);
                // local_len= makes the local buffer shorter than the WR (a
                // local protection error when gathering/scattering, MR-7.3.5).
                let ll = a.num_or("local_len", wr.len.max(8) as u64)? as usize;
                if ll > 64 << 20 {
                    return Err("local buffer too large".into());
                }
                let data = match a.0.get("data") {
                    Some(h) => unhex(h)?,
                    None => (0..ll as u32)
                        .map(|i| i.wrapping_mul(7).wrapping_add(wr_id as u32) as u8)
                        .collect(),
                };
                let mut local = data;
                local.resize(ll, 0);
                qp.conn
                    .post_send(wr)
                    .map_err(|e| format!("post_send: {e:?}"))?;
                qp.bufs.local.insert(wr_id, local);
                "ok".into()
            }
            "local_buf" | "recv_buf" => {
                let qp = self
                    .qps
                    .get(&(a.num("qpn")? as u32))
                    .ok_or("no such qp")?;
                let wr = a.num("wr")?;
                let b = if *cmd == "local_buf" {
                    qp.bufs.local.get(&wr)
                } else {
                    qp.bufs.recv.get(&wr)
                }
                .ok_or("no such buffer")?;
                format!("ok data={}", hex(b))
            }
            "poll_cq" => {
                let qpn = a.num("qpn")? as u32;
                let max = a.num_or("max", 1024)? as usize;
                self.take_cq(qpn, max)
            }
            "wait_cq" => {
                let qpn = a.num("qpn")? as u32;
                if !self.qps.contains_key(&qpn) {
                    return Err("no such qp".into());
                }
                let n = a.num_or("n", 1)? as usize;
                let ms = a.num_or("timeout_ms", 1000)?.min(30_000);
                self.waiter = Some(Waiter {
                    qpn,
                    n,
                    deadline: self.now() + ms * 1_000_000,
                });
                self.pump();
                self.try_waiter(false);
                return Ok(None);
            }
            "counters" => {
                let mut s = String::from("ok");
                for (k, v) in &self.ctr {
                    s.push_str(&format!(" {k}={v}"));
                }
                if let Some(qp) = a
                    .0
                    .get("qpn")
                    .and_then(|q| parse_num(q).ok())
                    .and_then(|q| self.qps.get(&(q as u32)))
                {
                    let st = qp.conn.stats();
                    s.push_str(&format!(
                        " tx_packets={} tx_data={} tx_retx={} tx_acks={} tx_probes={} rx_packets={} rx_invalid={} rx_dup={} lost_detected={} path_timeouts={} rto={} tlp={} repaths={} rnr_naks={} state={}",
                        st.tx_packets, st.tx_data, st.tx_retx, st.tx_acks, st.tx_probes,
                        st.rx_packets, st.rx_invalid, st.rx_dup, st.lost_detected,
                        st.path_timeouts, st.rto, st.tlp, st.repaths, st.rnr_naks,
                        match qp.conn.state() { QpState::Rts => "rts", QpState::Error => "err" }
                    ));
                }
                s
            }
            "paths" => {
                let qp = self
                    .qps
                    .get(&(a.num("qpn")? as u32))
                    .ok_or("no such qp")?;
                let mut v = Vec::new();
                let mut p = 0;
                while let Some(i) = qp.conn.path_info(p) {
                    v.push(format!(
                        "{},{},{},{},{},{},{}",
                        p,
                        match i.status {
                            PathStatus::Active => "active",
                            PathStatus::Suspect => "suspect",
                            PathStatus::Failed => "failed",
                        },
                        i.src_port,
                        i.cwnd,
                        i.inflight,
                        i.srtt_ns,
                        i.generation
                    ));
                    p += 1;
                }
                format!("ok paths={}", v.join(";"))
            }
            "events" => {
                let e = std::mem::take(&mut self.events);
                format!("ok ev={}", e.join(";"))
            }
            "set_error" => {
                let qp = self
                    .qps
                    .get_mut(&(a.num("qpn")? as u32))
                    .ok_or("no such qp")?;
                // Spec: MR-5.4.7 — the consumer moves the QP to the error state.
                qp.conn.close();
                "ok".into()
            }
            "set_credit" => {
                let qp = self
                    .qps
                    .get_mut(&(a.num("qpn")? as u32))
                    .ok_or("no such qp")?;
                let b = a.num_or("bytes", u64::MAX)?;
                qp.conn
                    .set_credit_hint(if b == u64::MAX { None } else { Some(b as u32) });
                "ok".into()
            }
            "quit" => {
                self.quit = true;
                "ok bye".into()
            }
            c => return Err(format!("unknown command {c}")),
        };
        Ok(Some(r))
    }

    fn recv_one(&mut self, buf: &mut [u8]) -> Option<(usize, SocketAddrV4, bool)> {
        let fd = self.sock.as_raw_fd();
        // SAFETY: recvmsg into owned buffers with correct lengths.
        unsafe {
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            let mut cbuf = [0u64; 16];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = &mut addr as *mut _ as *mut libc::c_void;
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
            let n = libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT);
            if n < 0 {
                return None;
            }
            let mut ce = false;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                    let tos = *libc::CMSG_DATA(c);
                    ce = tos & 3 == 3;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            let src = SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
                u16::from_be(addr.sin_port),
            );
            Some((n as usize, src, ce))
        }
    }

    fn run(&mut self) {
        let sfd = self.sock.as_raw_fd();
        let mut inbuf: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 65536];
        let mut stdin_open = true;
        while !self.quit {
            self.pump();
            self.try_waiter(false);
            // Commands queued while a waiter was pending.
            while self.waiter.is_none() && !self.quit {
                let Some(l) = self.pending.pop_front() else { break };
                self.run_line(&l);
                self.pump();
                self.try_waiter(false);
            }
            if self.quit {
                break;
            }
            let now = self.now();
            // Sleep until the core's next deadline (poll_timeout), a waiter's
            // deadline or input; the 1 s cap only bounds an idle loop, so a
            // deadline the core forgets to report shows up as a late timer.
            let wait_ns = match self.next_deadline() {
                Some(t) => t.saturating_sub(now).min(1_000_000_000),
                None => 1_000_000_000,
            };
            let mut fds = [
                libc::pollfd { fd: sfd, events: libc::POLLIN, revents: 0 },
                libc::pollfd {
                    fd: if stdin_open { 0 } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ts = libc::timespec {
                tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: ppoll on two valid pollfd entries.
            let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
            if r < 0 {
                continue;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                // Drain the socket (bounded per round so commands keep flowing).
                for _ in 0..256 {
                    let Some((n, src, ce)) = self.recv_one(&mut buf) else { break };
                    let d = buf[..n].to_vec();
                    self.on_datagram(src, ce, &d);
                    self.pump();
                }
            }
            if stdin_open && fds[1].revents & (libc::POLLIN | libc::POLLHUP) != 0 {
                let mut chunk = [0u8; 65536];
                // SAFETY: read into an owned buffer.
                let n = unsafe { libc::read(0, chunk.as_mut_ptr() as *mut libc::c_void, chunk.len()) };
                if n <= 0 {
                    stdin_open = false;
                    self.quit = true;
                } else {
                    inbuf.extend_from_slice(&chunk[..n as usize]);
                    while let Some(p) = inbuf.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = inbuf.drain(..=p).collect();
                        let l = String::from_utf8_lossy(&line).trim().to_string();
                        self.pending.push_back(l);
                    }
                }
            }
        }
    }

    fn run_line(&mut self, l: &str) {
        if l.is_empty() || l.starts_with('#') {
            return;
        }
        // Process whatever already arrived on the socket first, so a command
        // issued after a datagram was sent sees its effect.
        let mut buf = vec![0u8; 65536];
        while let Some((n, src, ce)) = self.recv_one(&mut buf) {
            let d = buf[..n].to_vec();
            self.on_datagram(src, ce, &d);
        }
        self.pump();
        match self.command(l) {
            Ok(Some(r)) => self.reply(&r),
            Ok(None) => {}
            Err(e) => self.reply(&format!("err {e}")),
        }
    }
}

fn main() {
    let mut addr = "127.0.0.2".to_string();
    let mut port = metaroce_proto::UDP_PORT;
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--addr" => {
                addr = args.get(i + 1).cloned().unwrap_or_default();
                i += 1;
            }
            "--port" => {
                port = args.get(i + 1).and_then(|p| p.parse().ok()).unwrap_or(port);
                i += 1;
            }
            _ => {
                eprintln!("usage: metaroce-endpoint [--addr IPV4] [--port UDP_PORT]");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let ip: Ipv4Addr = match addr.parse() {
        Ok(ip) if allowed_addr(ip) => ip,
        _ => {
            eprintln!("metaroce-endpoint: address must be in 127.0.0.0/8 or 198.18.0.0/15");
            std::process::exit(2);
        }
    };
    let sock = match UdpSocket::bind(SocketAddrV4::new(ip, port)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("metaroce-endpoint: bind {ip}:{port}: {e}");
            std::process::exit(1);
        }
    };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a c_int on an owned socket.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_RECVTOS,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let mut ep = Endpoint {
        start: std::time::Instant::now(),
        local_ip: ip,
        port,
        sock,
        tx_socks: HashMap::new(),
        qps: BTreeMap::new(),
        mrs: BTreeMap::new(),
        events: Vec::new(),
        ctr: BTreeMap::new(),
        waiter: None,
        pending: VecDeque::new(),
        out: std::io::stdout(),
        quit: false,
    };
    ep.reply(&format!("ready addr={ip} port={port}"));
    ep.run();
}
