//! A deterministic discrete-event network simulator for MetaRoCE
//! connections: virtual time, per-link bandwidth, propagation delay, finite
//! FIFO queues with ECN marking, random loss, duplication, reordering and
//! black holes. Host-only (uses std); drives `Connection`s exactly as the
//! kernel does: datagrams in, `poll_transmit` out, timers from
//! `poll_timeout`.
#![allow(dead_code, unreachable_pub, missing_docs)]

use crate::common::{draw_ppm, Rng, VecMemory};
use metaroce_proto::{
    AtomicOp, Completion, Config, Connection, Instant, LocalMemory, MemError, Responder,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

#[derive(Clone, Copy, Debug)]
pub struct LinkCfg {
    pub gbps: u64,
    pub delay_ns: u64,
    pub queue_bytes: u64,
    pub ecn_k_bytes: u64,
    pub loss_ppm: u64,
    pub dup_ppm: u64,
    pub reorder_ppm: u64,
    pub reorder_ns: u64,
    /// This many ppm of the packets skip the link's delay (netem's `delay D
    /// reorder P`: a few packets overtake the rest by the whole delay).
    pub skip_delay_ppm: u64,
    pub blackhole_from: Option<u64>,
    /// Marks CE on this many ppm of the packets regardless of the queue.
    pub ce_ppm: u64,
    /// Every `stall_period_ns` the link holds what arrives for `stall_ns` and then
    /// delivers it in order, as a receiving CPU with a backlog does (receive
    /// steering spreads a connection's paths over CPUs). Each link's stalls are
    /// offset by its index times `2 * stall_ns`, so the links stall in turn.
    pub stall_period_ns: u64,
    pub stall_ns: u64,
}

impl LinkCfg {
    pub fn dc(delay_ns: u64) -> Self {
        LinkCfg {
            gbps: 100,
            delay_ns,
            queue_bytes: 2 << 20,
            ecn_k_bytes: 96 << 10,
            loss_ppm: 0,
            dup_ppm: 0,
            reorder_ppm: 0,
            reorder_ns: 0,
            skip_delay_ppm: 0,
            blackhole_from: None,
            ce_ppm: 0,
            stall_period_ns: 0,
            stall_ns: 0,
        }
    }
}

#[derive(Debug)]
pub struct Link {
    pub cfg: LinkCfg,
    busy_until: u64,
    pub max_queue: u64,
    pub drops: u64,
    pub marks: u64,
    pub bytes: u64,
}

impl Link {
    fn new(cfg: LinkCfg) -> Self {
        Link {
            cfg,
            busy_until: 0,
            max_queue: 0,
            drops: 0,
            marks: 0,
            bytes: 0,
        }
    }
    fn ser_ns(&self, bytes: usize) -> u64 {
        ((bytes as u64 + 64) * 8).div_ceil(self.cfg.gbps)
    }
}

/// Memory wrapper that checks "last byte placed last" (spec MR-4.3.3):
/// whenever a write covers a watched final byte, the whole watched message
/// must already hold its expected contents.
///
/// It can also finish copies late, as a driver that copies after releasing
/// the connection's lock does (spec MR-10.1.3): with probability `late_ppm`
/// a write is checked, kept, and made only at [`SimMem::finish_copies`];
/// [`Responder::placed`] is false meanwhile.
#[derive(Default, Debug, Clone)]
pub struct SimMem {
    pub m: VecMemory,
    pub watch: HashMap<(u32, u64), (u64, Vec<u8>)>,
    pub tail_violations: u64,
    pub tail_checks: u64,
    pub late_ppm: u64,
    pub late_seed: u64,
    /// Writes checked but not yet made.
    pub late: Vec<LateCopy>,
    /// Writes that were made late, in all.
    pub late_copies: u64,
}

/// A write [`SimMem`] makes later.
#[derive(Debug, Clone)]
pub enum LateCopy {
    Remote(u32, u64, Vec<u8>),
    Recv(u64, u32, Vec<u8>),
    Local(u64, u32, Vec<u8>),
}

impl SimMem {
    /// Whether the next write is left for later.
    fn leave(&mut self) -> bool {
        self.late_ppm > 0 && draw_ppm(&mut self.late_seed, self.late_ppm)
    }

    /// Makes every write left for later, in the order they were asked.
    pub fn finish_copies(&mut self) {
        for c in std::mem::take(&mut self.late) {
            self.late_copies += 1;
            let r = match c {
                LateCopy::Remote(k, va, d) => self.write_now(k, va, &d),
                LateCopy::Recv(w, o, d) => self.m.write_recv(w, o, &d),
                LateCopy::Local(w, o, d) => self.m.write_local(w, o, &d),
            };
            assert_eq!(r, Ok(()), "a late copy failed after its check passed");
        }
    }

    fn write_now(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        self.m.write_remote(rkey, va, data)?;
        let end = va + data.len() as u64;
        if !self.watch.is_empty() {
            let hits: Vec<_> = self
                .watch
                .iter()
                .filter(|((k, last), _)| *k == rkey && *last >= va && *last < end)
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            for ((k, _), (start, expect)) in hits {
                self.tail_checks += 1;
                let (base, buf) = &self.m.regions[&k];
                let o = (start - base) as usize;
                if buf[o..o + expect.len()] != expect[..] {
                    self.tail_violations += 1;
                }
            }
        }
        Ok(())
    }
}

impl Responder for SimMem {
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        if self.leave() {
            self.m.range(rkey, va, data.len())?;
            self.late.push(LateCopy::Remote(rkey, va, data.to_vec()));
            return Ok(());
        }
        self.write_now(rkey, va, data)
    }
    fn placed(&mut self) -> bool {
        self.late.is_empty()
    }
    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.m.read_remote(rkey, va, out)
    }
    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.m.atomic_remote(rkey, va, op)
    }
    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        let fits = |m: &VecMemory| {
            m.recv.get(&wr_id).is_some_and(|b| b.len() >= offset as usize + data.len())
        };
        if fits(&self.m) && self.leave() {
            self.late.push(LateCopy::Recv(wr_id, offset, data.to_vec()));
            return Ok(());
        }
        self.m.write_recv(wr_id, offset, data)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        self.m.invalidate(rkey)
    }
}

impl LocalMemory for SimMem {
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError> {
        self.m.read_local(wr_id, offset, out)
    }
    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        if self.leave() {
            self.late.push(LateCopy::Local(wr_id, offset, data.to_vec()));
            return Ok(());
        }
        self.m.write_local(wr_id, offset, data)
    }
}

pub struct Endpoint {
    pub host: usize,
    pub peer_host: usize,
    pub conn: Connection,
    pub mem: SimMem,
    pub completions: Vec<(u64, Completion)>,
}

struct Pkt {
    route: [usize; 3],
    hop: usize,
    dst_host: usize,
    src_port: u16,
    ce: bool,
    bytes: Vec<u8>,
}

pub struct Net {
    pub now: u64,
    pub links: Vec<Link>,
    up: Vec<usize>,
    down: Vec<usize>,
    /// fabric[dir][i]: dir 0 for lower-to-higher host index, 1 otherwise.
    pub fabric: [Vec<usize>; 2],
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slab: Vec<Option<Pkt>>,
    free: Vec<usize>,
    seq: u64,
    pub rng: Rng,
    pub eps: Vec<Endpoint>,
    qpn_map: HashMap<(usize, u32), usize>,
    buf: Vec<u8>,
    pub delivered_packets: u64,
    /// When set, every ACK is sent with this MRH path id from this UDP
    /// source port (so over one fabric link), whatever path it echoes:
    /// ACKs returning over a different path than the data (MR-3.5.1).
    pub ack_return: Option<(u8, u16)>,
}

impl Net {
    /// `hosts` hosts, each with a NIC uplink/downlink, joined by
    /// `fabric_links` parallel links per direction (ECMP by source port).
    pub fn new(
        hosts: usize,
        fabric_links: usize,
        edge: LinkCfg,
        fabric: LinkCfg,
        seed: u64,
    ) -> Self {
        let mut links = Vec::new();
        let mut up = Vec::new();
        let mut down = Vec::new();
        for _ in 0..hosts {
            up.push(links.len());
            links.push(Link::new(edge));
            down.push(links.len());
            links.push(Link::new(edge));
        }
        let mut fab = [Vec::new(), Vec::new()];
        for d in fab.iter_mut() {
            for _ in 0..fabric_links {
                d.push(links.len());
                links.push(Link::new(fabric));
            }
        }
        Net {
            now: 0,
            links,
            up,
            down,
            fabric: fab,
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
            rng: Rng::new(seed),
            eps: Vec::new(),
            qpn_map: HashMap::new(),
            buf: vec![
                0;
                metaroce_proto::connection::MAX_HEADER
                    + metaroce_proto::wire::MAX_MTU as usize
            ],
            delivered_packets: 0,
            ack_return: None,
        }
    }

    /// Connects hosts `a` and `b` with one RC connection; returns the two
    /// endpoint indices.
    pub fn connect(
        &mut self,
        a: usize,
        b: usize,
        qa: u32,
        qb: u32,
        tweak: impl Fn(&mut Config),
    ) -> (usize, usize) {
        let mut ca = Config::test_pair(qa, qb);
        let mut cb = Config::test_pair(qb, qa);
        tweak(&mut ca);
        tweak(&mut cb);
        let ia = self.eps.len();
        self.eps.push(Endpoint {
            host: a,
            peer_host: b,
            conn: Connection::new(ca),
            mem: SimMem::default(),
            completions: vec![],
        });
        self.eps.push(Endpoint {
            host: b,
            peer_host: a,
            conn: Connection::new(cb),
            mem: SimMem::default(),
            completions: vec![],
        });
        self.qpn_map.insert((a, qa), ia);
        self.qpn_map.insert((b, qb), ia + 1);
        (ia, ia + 1)
    }

    fn schedule(&mut self, t: u64, pkt: Pkt) {
        let id = match self.free.pop() {
            Some(i) => {
                self.slab[i] = Some(pkt);
                i
            }
            None => {
                self.slab.push(Some(pkt));
                self.slab.len() - 1
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, id)));
    }

    /// Puts a packet on the link of its current hop.
    fn enqueue(&mut self, mut pkt: Pkt) {
        let li = pkt.route[pkt.hop];
        let now = self.now;
        let size = pkt.bytes.len();
        let (loss, dup, reo, reo_ns, black, ce_ppm, skip, stall) = {
            let l = &self.links[li];
            (
                l.cfg.loss_ppm,
                l.cfg.dup_ppm,
                l.cfg.reorder_ppm,
                l.cfg.reorder_ns,
                l.cfg.blackhole_from,
                l.cfg.ce_ppm,
                l.cfg.skip_delay_ppm,
                (l.cfg.stall_period_ns, l.cfg.stall_ns),
            )
        };
        let skip_delay = skip > 0 && self.rng.chance_ppm(skip);
        let force_ce = ce_ppm > 0 && self.rng.chance_ppm(ce_ppm);
        if black.map(|t| now >= t).unwrap_or(false) || (loss > 0 && self.rng.chance_ppm(loss)) {
            self.links[li].drops += 1;
            return;
        }
        let duplicate = dup > 0 && self.rng.chance_ppm(dup);
        let extra = if reo > 0 && self.rng.chance_ppm(reo) {
            reo_ns
        } else {
            0
        };
        let l = &mut self.links[li];
        let backlog_ns = l.busy_until.saturating_sub(now);
        let occupancy = backlog_ns * l.cfg.gbps / 8;
        if occupancy + size as u64 > l.cfg.queue_bytes {
            l.drops += 1;
            return;
        }
        l.max_queue = l.max_queue.max(occupancy + size as u64);
        if occupancy > l.cfg.ecn_k_bytes || force_ce {
            pkt.ce = true;
            l.marks += 1;
        }
        l.bytes += size as u64;
        let start = l.busy_until.max(now);
        l.busy_until = start + l.ser_ns(size);
        let delay = if skip_delay { 0 } else { l.cfg.delay_ns };
        let mut arrive = l.busy_until + delay + extra;
        if stall.0 > 0 {
            let phase = (arrive + li as u64 * 2 * stall.1) % stall.0;
            if phase < stall.1 {
                arrive += stall.1 - phase;
            }
        }
        pkt.hop += 1;
        if duplicate {
            let copy = Pkt {
                route: pkt.route,
                hop: pkt.hop,
                dst_host: pkt.dst_host,
                src_port: pkt.src_port,
                ce: pkt.ce,
                bytes: pkt.bytes.clone(),
            };
            self.schedule(arrive + 50, copy);
        }
        self.schedule(arrive, pkt);
    }

    /// Drains every endpoint's `poll_transmit` into its host uplink.
    pub fn pump(&mut self) {
        let now = Instant(self.now);
        for i in 0..self.eps.len() {
            loop {
                let ep = &mut self.eps[i];
                let Some(t) = ep.conn.poll_transmit(now, &mut self.buf, &mut ep.mem) else {
                    break;
                };
                let (src, dst) = (ep.host, ep.peer_host);
                let mut src_port = t.src_port;
                if let Some((path, port)) = self.ack_return {
                    if self.buf[1] == 0x20 {
                        self.buf[3] = (self.buf[3] & 0xf0) | (path & 0x0f);
                        src_port = port;
                    }
                }
                let dir = usize::from(src > dst);
                let fab = self.fabric[dir][src_port as usize % self.fabric[dir].len()];
                let pkt = Pkt {
                    route: [self.up[src], fab, self.down[dst]],
                    hop: 0,
                    dst_host: dst,
                    src_port,
                    ce: false,
                    bytes: self.buf[..t.len].to_vec(),
                };
                self.enqueue(pkt);
            }
            let ep = &mut self.eps[i];
            // Spec: MR-10.1.3 — completions wait for late copies.
            while ep.mem.late.is_empty() {
                let Some(c) = ep.conn.poll_completion() else { break };
                ep.completions.push((self.now, c));
            }
        }
    }

    fn next_time(&self) -> Option<u64> {
        let mut t = self.heap.peek().map(|Reverse((t, _, _))| *t);
        for ep in &self.eps {
            if let Some(d) = ep.conn.poll_timeout() {
                let d = d.as_nanos().max(self.now);
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        }
        t
    }

    /// Advances to the next event time and processes everything due.
    /// Returns false when nothing is scheduled before `end`.
    pub fn step(&mut self, end: u64) -> bool {
        self.pump();
        let Some(mut t) = self.next_time() else {
            return false;
        };
        if t >= end {
            self.now = end;
            return false;
        }
        if t < self.now {
            t = self.now;
        }
        self.now = t;
        while let Some(Reverse((at, _, id))) = self.heap.peek().copied() {
            if at > self.now {
                break;
            }
            self.heap.pop();
            let pkt = self.slab[id].take().unwrap();
            self.free.push(id);
            if pkt.hop < 3 {
                self.enqueue(pkt);
            } else {
                self.deliver(pkt);
            }
        }
        let now = Instant(self.now);
        for ep in self.eps.iter_mut() {
            if ep.conn.poll_timeout().map(|d| d <= now).unwrap_or(false) {
                ep.conn.handle_timeout(now);
            }
            // Late copies finish at a random later step (MR-10.1.3).
            if !ep.mem.late.is_empty() && self.rng.below(2) == 0 {
                ep.mem.finish_copies();
            }
            // A driver resumes delivery once a fault is served (MR-9.2.5),
            // or its late copies are done (MR-10.1.3).
            ep.conn.resume_delivery(now, &mut ep.mem);
        }
        self.pump();
        // Spec: MR-8.1.1 — per-path inflight matches the in-flight packets.
        for (i, ep) in self.eps.iter().enumerate() {
            if let Err(e) = ep.conn.check_invariants() {
                panic!("endpoint {i} at {} ns: {e}", self.now);
            }
        }
        true
    }

    fn deliver(&mut self, pkt: Pkt) {
        self.delivered_packets += 1;
        let qpn = u32::from_be_bytes([0, pkt.bytes[5], pkt.bytes[6], pkt.bytes[7]]);
        if let Some(&i) = self.qpn_map.get(&(pkt.dst_host, qpn)) {
            let ep = &mut self.eps[i];
            ep.conn.handle_datagram(
                Instant(self.now),
                pkt.src_port,
                pkt.ce,
                &pkt.bytes,
                &mut ep.mem,
            );
        }
    }

    pub fn fabric_link(&mut self, dir: usize, i: usize) -> &mut Link {
        let li = self.fabric[dir][i];
        &mut self.links[li]
    }

    pub fn downlink(&self, host: usize) -> &Link {
        &self.links[self.down[host]]
    }

    pub fn downlink_mut(&mut self, host: usize) -> &mut Link {
        let i = self.down[host];
        &mut self.links[i]
    }

    /// Sets a fabric impairment on every fabric link, both directions.
    pub fn impair_fabric(&mut self, f: impl Fn(&mut LinkCfg)) {
        for d in 0..2 {
            for i in 0..self.fabric[d].len() {
                let li = self.fabric[d][i];
                f(&mut self.links[li].cfg);
            }
        }
    }
}

/// Jain's fairness index of `x`, as parts per thousand.
pub fn jain_permille(x: &[u64]) -> u64 {
    let s: u128 = x.iter().map(|v| *v as u128).sum();
    let s2: u128 = x.iter().map(|v| (*v as u128) * (*v as u128)).sum();
    if s2 == 0 {
        return 1000;
    }
    (s * s * 1000 / (x.len() as u128 * s2)) as u64
}

pub mod scenarios;
