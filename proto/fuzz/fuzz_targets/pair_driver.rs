//! The `pair` fuzz driver: two connected RC connections whose every packet
//! passes through a network the input controls, with verbs posted, time
//! moved and timers fired as the input says; then a settling phase on a
//! perfect network. Shared by the coverage-guided target
//! (`fuzz_targets/pair.rs`) and by `cargo test` (`tests/fuzz_pair.rs`), which
//! replays the saved inputs of `fuzz/regressions/pair/` and a stream of
//! pseudo-random ones.
//!
//! The input is a script: each operation is one byte (which side, what) and
//! its arguments, read from the bytes after it (zero once the input ends).
//! The network can drop, duplicate, reorder (deliver any queued packet),
//! CE-mark and split packets, and inject corrupted copies or raw bytes.
//!
//! What must hold, whatever the input (a violation panics, which the fuzzer
//! reports as a crash):
//! * nothing in the core panics or overflows (MR-3.1.6, MR-10.1.2);
//! * both connections' bookkeeping is consistent after every operation
//!   ([`Connection::check_invariants`], MR-5.3.1);
//! * every work request completes at most once, and only if it was posted;
//! * while no forged packet has been delivered: a successful receive
//!   completion carries the next message the peer posted (exactly once, in
//!   order, MR-4.1) with its bytes and immediate data;
//! * send completions come in posting order, an unsignaled work request's
//!   only if it failed (MR-7.3.3, MR-7.4.2);
//! * while no forged packet has been delivered: a successful READ brought
//!   the bytes the peer's region holds, unless a later work request of the
//!   reader may have changed them since (MR-4.3);
//! * after settling: a side never waits for a peer without a timer
//!   (MR-5.5.4); and, while no forged packet was delivered, every send-queue
//!   work request of either side has completed, and a QP in the error state
//!   has flushed the receives it holds too (MR-7.3).
//!
//! [`run_variants`] reads a first byte that switches on [`Variants`]:
//! unsignaled work requests, shared receive queues (which other QPs' messages
//! drain now and then, as on an SRQ several QPs share), a responder that sends
//! from the QPN-derived TSN (a verbs QP left in RTR), fewer READs and
//! atomics outstanding, congestion control at its tightest delay target, and
//! reconnection of both QPs with the same numbers while the earlier pair's
//! packets are still in the network. Those packets are genuine, not forged: the new pair must
//! refuse them, and every check above still applies. With reconnection on, a
//! rare operation also resets one QP alone, which then starts anew while its
//! peer goes on with the earlier connection: neither may take the other's
//! messages or acknowledgements (a message reaches a peer only from the
//! connection it is part of), and both must end their work.
#![allow(dead_code)]

use crate::common::VecMemory;
use metaroce_proto::*;
use std::collections::{HashMap, HashSet, VecDeque};

const REGION_KEY: u32 = 0x55;
const BAD_KEY: u32 = 0x66;
const REGION_BASE: u64 = 0x1_0000;
const REGION_LEN: usize = 1 << 16;
/// Packets the network holds per direction; more are dropped (as a full
/// queue would).
const QUEUE_CAP: usize = 512;
/// Longest message the script posts.
const MAX_LEN: u32 = 20_000;
/// Operations of one input, at most (the rest is ignored), to keep runs short.
const MAX_OPS: usize = 4_000;
/// Virtual time the settling phase may take.
const SETTLE_LIMIT_NS: u64 = 120_000_000_000;
/// Timer firings the settling phase may take: every wait that ends (retries,
/// backoff to `max_rto`, RNR waits once receives are posted) ends in far fewer,
/// and a wedge that resends every few microseconds would otherwise run a
/// fuzz input for seconds.
const SETTLE_LIMIT_FIRINGS: u32 = 20_000;

/// What an input of [`run_variants`] switches on (its first byte).
#[derive(Clone, Copy, Debug, Default)]
struct Variants {
    /// A send-queue work request is unsignaled when a byte read after its
    /// other arguments is a multiple of four (MR-7.4.2).
    unsignaled: bool,
    /// Side `k` takes its receive WQEs from a shared receive queue when a
    /// message needs one (MR-4.2.3).
    shared_recv: [bool; 2],
    /// Side 1 is a responder left in RTR: it posts no sends and its
    /// responses start at the QPN-derived TSN, which side 0 accepts
    /// (MR-7.1.5); side 0 was told some other initial TSN.
    derived_tsn: bool,
    /// Operation 12 reconnects: both QPs restart with the same numbers and
    /// new initial TSNs, the network keeping the earlier pair's packets; a
    /// rare operation resets one QP alone ([`Pair::reset_one`]).
    reconnect: bool,
    /// Side `k` keeps at most this many READs and atomics outstanding
    /// (verbs `max_rd_atomic`; the core's largest if `None`).
    max_rd_atomic: [Option<u8>; 2],
    /// Congestion control aims at 1 us of queueing delay (the smallest
    /// `cc_target_delay_us` the kernel module takes), so that the script's
    /// clock, which moves in jumps, keeps the windows at their floor.
    tight_cc: bool,
}

impl Variants {
    fn from_byte(b: u8) -> Variants {
        Variants {
            unsignaled: b & 1 != 0,
            shared_recv: [b & 2 != 0, b & 4 != 0],
            derived_tsn: b & 8 != 0,
            reconnect: b & 16 != 0,
            max_rd_atomic: [(b & 32 != 0).then_some(1), (b & 64 != 0).then_some(2)],
            tight_cc: b & 128 != 0,
        }
    }
}

/// The script's bytes, read front to back; zeros once it ends.
struct Script<'a> {
    bytes: &'a [u8],
}

impl Script<'_> {
    fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[derive(Clone)]
struct Packet {
    bytes: Vec<u8>,
    src_port: u16,
}

/// A READ of the peer's region, and whether a later work request of the
/// reader may have changed those bytes since the responder read them.
#[derive(Clone, Copy, Debug)]
struct ReadCheck {
    va: u64,
    len: u32,
    overwritten: bool,
}

/// A message that consumes a receive at the peer, as posted.
#[derive(Clone, Copy, Debug)]
enum Message {
    Send { wr_id: u64, len: u32, imm: Option<u32> },
    WriteImm { wr_id: u64, imm: u32 },
}

struct Side {
    conn: Connection,
    /// The reconnection generation this side's connection was started in:
    /// two sides are connected to each other only while theirs are equal (a
    /// QP reset alone starts a generation its peer is not part of).
    epoch: u32,
    mem: VecMemory,
    /// Messages posted here that the peer receives, oldest first, each with
    /// the [`Side::epoch`] it was posted in; the peer's receive completions
    /// take them off in order.
    messages: VecDeque<(u32, Message)>,
    /// Send-queue work requests posted and not completed, in posting order,
    /// with whether each is signaled.
    open_sends: VecDeque<(u64, bool)>,
    /// Receive work requests posted and not completed.
    open_recvs: HashSet<u64>,
    next_wr: u64,
    /// Which side this is (0 or 1): part of every wr_id and payload pattern.
    id: u64,
    /// Posts may be unsignaled ([`Variants::unsignaled`]).
    may_unsignal: bool,
    /// READs posted and not completed, by wr_id.
    reads: HashMap<u64, ReadCheck>,
    /// Send-queue work requests that completed successfully.
    succeeded: HashSet<u64>,
}

/// The byte at `i` of the payload of work request `wr_id` (distinct per
/// message, so a misplaced or stale payload shows).
fn pattern(wr_id: u64, i: usize) -> u8 {
    (wr_id.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64 * 7) >> 3) as u8
}

impl Side {
    fn new(cfg: Config, id: u64, v: &Variants) -> Side {
        let mut mem = VecMemory::new();
        mem.add_region(REGION_KEY, REGION_BASE, REGION_LEN);
        if v.shared_recv[id as usize] {
            mem.shared = Some(Default::default());
        }
        Side {
            conn: Connection::new(cfg),
            epoch: 0,
            mem,
            messages: VecDeque::new(),
            open_sends: VecDeque::new(),
            open_recvs: HashSet::new(),
            next_wr: 1,
            id,
            may_unsignal: v.unsignaled,
            reads: HashMap::new(),
            succeeded: HashSet::new(),
        }
    }

    /// The receives this side's connection holds (posted to it, or taken
    /// from the shared queue): those still in the shared queue are the
    /// queue's, not the QP's.
    fn recvs_held(&self) -> Vec<u64> {
        let pooled: HashSet<u64> = self.mem.shared.as_ref().map(|q| q.borrow().iter().map(|r| r.wr_id).collect()).unwrap_or_default();
        self.open_recvs.iter().copied().filter(|w| !pooled.contains(w)).collect()
    }

    /// Whether every send-queue work request has completed: those left open
    /// are unsignaled ones, which complete silently, once the connection
    /// holds none.
    fn sends_settled(&mut self) -> bool {
        if self.open_sends.iter().all(|&(_, signaled)| !signaled) && !self.conn.sends_outstanding() {
            self.open_sends.clear();
        }
        self.open_sends.is_empty()
    }

    /// The QP through RESET to RTS with `cfg`, in generation `epoch`: work
    /// posted to it is forgotten (verbs: no completions).
    fn restart(&mut self, cfg: Config, epoch: u32) {
        self.conn.reset(cfg);
        self.epoch = epoch;
        self.open_sends.clear();
        self.reads.clear();
        self.succeeded.clear();
        // What the connection held went with it; a shared queue's WQEs stay.
        for w in self.recvs_held() {
            self.open_recvs.remove(&w);
        }
    }

    fn new_wr_id(&mut self) -> u64 {
        let w = self.id << 40 | self.next_wr;
        self.next_wr += 1;
        w
    }

    fn post_send(&mut self, s: &mut Script<'_>) {
        let kind = s.byte();
        let len = u32::from(s.u16()) % (MAX_LEN + 1);
        let off = u64::from(s.u16());
        let va = if kind & 0x80 != 0 { REGION_BASE + off + REGION_LEN as u64 / 2 } else { REGION_BASE + off / 2 };
        let rkey = if kind & 0x40 != 0 && s.byte() < 16 { BAD_KEY } else { REGION_KEY };
        let mut flags = WR_SIGNALED | (kind >> 4 & (WR_FENCE | WR_SOLICITED));
        let wr_id = self.new_wr_id();
        let va8 = va & !7;
        let (wr, message) = match kind % 10 {
            0 => (SendWr::send(wr_id, len), Some(Message::Send { wr_id, len, imm: None })),
            1 => {
                let imm = s.u32();
                (SendWr::send_imm(wr_id, len, imm), Some(Message::Send { wr_id, len, imm: Some(imm) }))
            }
            2 => (SendWr::write(wr_id, len, va, rkey), None),
            3 => {
                // Always a valid target: a WRITE_IMM consumes a receive only if
                // it lands, and the order oracle needs to know which did.
                let imm = s.u32();
                let len = len.min(REGION_LEN as u32 / 2);
                let va = REGION_BASE + off % (REGION_LEN as u64 / 2);
                (SendWr::write_imm(wr_id, len, va, REGION_KEY, imm), Some(Message::WriteImm { wr_id, imm }))
            }
            4 => (SendWr::read(wr_id, len, va, rkey), None),
            5 => (SendWr::faa(wr_id, va8, rkey, u64::from(s.u32())), None),
            6 => (SendWr::cas(wr_id, va8, rkey, 0, u64::from(s.u32())), None),
            7 => (SendWr::atomic_write(wr_id, va8, rkey), None),
            8 => {
                let what = s.byte();
                let f = Flush { global: what & 1 != 0, persistent: what & 2 != 0, whole_region: what & 4 != 0 };
                (SendWr::flush(wr_id, va, rkey, len, f), None)
            }
            _ => {
                // SEND with invalidate: of a key the peer does not have (its
                // NAK ends the connection), rarely of the one it has (its
                // later accesses fail).
                let key = if s.byte() == 0x5a { REGION_KEY } else { BAD_KEY };
                let mut wr = SendWr::send(wr_id, len);
                wr.opcode = WrOpcode::SendInv;
                wr.imm = key;
                (wr, Some(Message::Send { wr_id, len, imm: None }))
            }
        };
        if self.may_unsignal && s.byte() % 4 == 0 {
            flags &= !WR_SIGNALED;
        }
        let signaled = flags & WR_SIGNALED != 0;
        let data = (0..wr.len as usize).map(|i| pattern(wr_id, i)).collect();
        self.mem.set_local(wr_id, data);
        // The bytes of the peer's region this request may change (all of
        // them, for an invalidation of the region's key: a READ posted before
        // it may succeed, and the region is gone by its completion).
        let changes = match wr.opcode {
            WrOpcode::Write | WrOpcode::WriteImm => Some((wr.remote_va, u64::from(wr.len))),
            WrOpcode::AtomicCas | WrOpcode::AtomicFaa | WrOpcode::AtomicWrite => Some((wr.remote_va, 8)),
            WrOpcode::SendInv if wr.imm == REGION_KEY => Some((0, u64::MAX)),
            _ => None,
        };
        match self.conn.post_send(wr.with_flags(flags)) {
            Ok(()) => {
                if let Some((va, len)) = changes {
                    for r in self.reads.values_mut() {
                        r.overwritten |= va < r.va.saturating_add(u64::from(r.len)) && r.va < va.saturating_add(len);
                    }
                }
                if wr.opcode == WrOpcode::Read {
                    self.reads.insert(wr_id, ReadCheck { va: wr.remote_va, len: wr.len, overwritten: false });
                }
                self.open_sends.push_back((wr_id, signaled));
                if let Some(m) = message {
                    self.messages.push_back((self.epoch, m));
                }
            }
            // Refused, but flushed (MR-7.3): it completes.
            Err(PostError::BadState) => {
                self.open_sends.push_back((wr_id, signaled));
            }
            Err(_) => {}
        }
    }

    /// A message of another QP on this side's shared receive queue took the
    /// queue's oldest WQE: it completes there, never here.
    fn sibling_takes_shared_recv(&mut self) {
        let taken = self.mem.shared.as_ref().and_then(|q| q.borrow_mut().pop_front());
        if let Some(wr) = taken {
            self.open_recvs.remove(&wr.wr_id);
        }
    }

    fn post_recv(&mut self, len: u32) -> bool {
        let wr_id = self.new_wr_id();
        self.mem.set_recv(wr_id, len as usize);
        if let Some(pool) = self.mem.shared.as_ref() {
            let mut pool = pool.borrow_mut();
            // An SRQ as deep as a QP's receive queue.
            if pool.len() >= 1024 {
                return false;
            }
            pool.push_back(RecvWr { wr_id, len });
            self.open_recvs.insert(wr_id);
            return true;
        }
        match self.conn.post_recv(RecvWr { wr_id, len }) {
            Ok(()) | Err(PostError::BadState) => {
                self.open_recvs.insert(wr_id);
                true
            }
            Err(_) => false,
        }
    }
}

/// `PAIR_TRACE=1` prints every packet, timer and completion (for replaying
/// one input by hand: `cargo test --test fuzz_pair -- --nocapture`).
fn tracing() -> bool {
    std::env::var_os("PAIR_TRACE").is_some()
}

struct Pair {
    trace: bool,
    variants: Variants,
    /// The configurations the connections were first started with; each
    /// reconnection changes their initial TSNs only.
    first_cfgs: [Config; 2],
    /// Reconnections so far.
    generation: u32,
    sides: [Side; 2],
    /// `queues[i]`: packets side `i` sent, not yet delivered.
    queues: [VecDeque<Packet>; 2],
    now: u64,
    /// A packet the peer did not send as it is (corrupted, cut, raw bytes)
    /// was delivered: payload and order checks no longer apply.
    forged: bool,
    buf: Vec<u8>,
}

impl Pair {
    fn check(&self, what: &str) {
        for (i, s) in self.sides.iter().enumerate() {
            if let Err(e) = s.conn.check_invariants() {
                panic!("side {i} after {what}: {e}");
            }
        }
    }

    fn transmit(&mut self, i: usize, most: usize) {
        let now = Instant(self.now);
        let side = &mut self.sides[i];
        for _ in 0..most {
            let Some(t) = side.conn.poll_transmit(now, &mut self.buf, &mut side.mem) else {
                break;
            };
            assert!(t.len <= self.buf.len(), "transmit longer than the buffer");
            if self.queues[i].len() < QUEUE_CAP {
                self.queues[i].push_back(Packet { bytes: self.buf[..t.len].to_vec(), src_port: t.src_port });
            }
        }
    }

    /// Hands `p` (sent by side `from`) to the other side, whole or in pieces.
    fn deliver(&mut self, from: usize, p: &Packet, ce: bool, cut: Option<(usize, usize)>) {
        let to = 1 - from;
        let now = Instant(self.now);
        if self.trace {
            let what = match wire::PacketRepr::parse(&p.bytes) {
                Ok(r) => format!("{r:?}"),
                Err(e) => format!("unparsed {e:?}"),
            };
            eprintln!("{:>12} {from}->{to} port {:#x} ce {ce} {what}", self.now, p.src_port);
        }
        let s = &mut self.sides[to];
        match cut {
            None => s.conn.handle_datagram(now, p.src_port, ce, &p.bytes, &mut s.mem),
            Some((a, b)) => {
                let a = a.min(p.bytes.len());
                let b = b.clamp(a, p.bytes.len());
                let (head, rest) = p.bytes.split_at(a);
                let (mid, tail) = rest.split_at(b - a);
                s.conn.handle_scattered(now, p.src_port, ce, head, &[mid, tail], &mut s.mem);
            }
        }
    }

    fn fire_due(&mut self, even_if_early: bool) {
        let now = Instant(self.now);
        for s in self.sides.iter_mut() {
            if even_if_early || s.conn.poll_timeout().is_some_and(|t| t <= now) {
                if self.trace {
                    eprintln!("{:>12} timeout {:?} {:?}", self.now, s.conn.state(), s.conn.tsn_state());
                }
                s.conn.handle_timeout(now);
            }
        }
    }

    fn poll_completions(&mut self) {
        for i in 0..2 {
            while let Some(c) = self.sides[i].conn.poll_completion() {
                self.completed(i, c);
            }
        }
        self.check_delivered();
    }

    fn completed(&mut self, i: usize, c: Completion) {
        if self.trace {
            eprintln!("{:>12} side {i} completes {c:?}", self.now);
        }
        // Both sides run the same service; UC is MR-4.6.
        let uc = self.sides[0].conn.config().uc;
        let (me, peer) = if i == 0 {
            let [a, b] = &mut self.sides;
            (a, b)
        } else {
            let [a, b] = &mut self.sides;
            (b, a)
        };
        if !c.opcode.is_recv() {
            let Some(k) = me.open_sends.iter().position(|&(w, _)| w == c.wr_id) else {
                panic!("side {i}: send completion {c:?} of no open work request");
            };
            // Spec: MR-7.3.3, MR-7.4.2 — in posting order; the unsignaled
            // work requests before it completed silently.
            if let Some(&(w, _)) = me.open_sends.iter().take(k).find(|&&(_, signaled)| signaled) {
                panic!("side {i}: send completion {c:?} before that of the earlier signaled work request {w:#x}");
            }
            let (_, signaled) = me.open_sends[k];
            assert!(
                signaled || c.status != WcStatus::Success,
                "side {i}: an unsignaled work request completed successfully: {c:?}"
            );
            me.open_sends.drain(..=k);
            if c.status == WcStatus::Success {
                me.succeeded.insert(c.wr_id);
            }
            let read = me.reads.remove(&c.wr_id);
            // Spec: MR-9.2.1 — a READ of zero bytes is not checked.
            let checked = read.filter(|r| !r.overwritten && r.len > 0 && !self.forged);
            if let (Some(r), WcStatus::Success) = (checked, c.status) {
                // Spec: MR-4.3 — the responder executed the READ after the
                // reader's earlier requests and before its later ones.
                let off = r.va.checked_sub(REGION_BASE).map(|o| o as usize);
                let region = peer.mem.regions.get(&REGION_KEY).map(|(_, bytes)| &bytes[..]);
                let want = off.and_then(|o| region?.get(o..o + r.len as usize));
                let Some(want) = want else {
                    panic!("side {i}: READ {c:?} of {r:?} outside the peer's region succeeded");
                };
                let got = &me.mem.local[&c.wr_id][..r.len as usize];
                if let Some(k) = (0..want.len()).find(|&k| got[k] != want[k]) {
                    panic!("side {i}: byte {k} of READ {c:?} ({r:?}) is {:#x}, the peer's region holds {:#x}", got[k], want[k]);
                }
            }
            return;
        }
        assert!(me.open_recvs.remove(&c.wr_id), "side {i}: receive completion {c:?} of no open work request");
        if self.forged {
            return;
        }
        match c.status {
            WcStatus::Success => {}
            // The message was received and did not fit: it is consumed.
            WcStatus::LocLenErr => {
                if uc {
                    // The first message still to come that did not fit (those
                    // before it that fit were dropped, or they would be here).
                    let room = me.mem.recv[&c.wr_id].len() as u32;
                    let too_long = |&(epoch, m): &(u32, Message)| {
                        epoch == me.epoch && matches!(m, Message::Send { len, .. } if len > room)
                    };
                    if let Some(k) = peer.messages.iter().position(too_long) {
                        peer.messages.drain(..=k);
                    }
                } else {
                    next_message(peer, me.epoch, i, &c);
                }
                return;
            }
            _ => return,
        }
        if uc {
            // Spec: MR-4.6 — UC drops a message that lost a packet: the
            // messages received are a subsequence of those sent, in order.
            let fits = |&(epoch, m): &(u32, Message)| match (m, c.opcode) {
                _ if epoch != me.epoch => false,
                (Message::Send { wr_id, len, imm }, WcOpcode::Recv) => {
                    let got = &me.mem.recv[&c.wr_id];
                    c.byte_len == len
                        && c.imm == imm
                        && (0..len as usize).all(|k| got[k] == pattern(wr_id, k))
                }
                (Message::WriteImm { imm, .. }, WcOpcode::RecvRdmaWithImm) => c.imm == Some(imm),
                _ => false,
            };
            let Some(k) = peer.messages.iter().position(fits) else {
                panic!("side {i}: UC receive {c:?} matches no message sent after the last one received");
            };
            peer.messages.drain(..=k);
            return;
        }
        let Some(m) = next_message(peer, me.epoch, i, &c) else {
            panic!("side {i}: receive completion {c:?} with no message sent");
        };
        match (m, c.opcode) {
            (Message::Send { wr_id, len, imm }, WcOpcode::Recv) => {
                assert_eq!(c.byte_len, len, "side {i}: length of {c:?}, sent {m:?}");
                assert_eq!(c.imm, imm, "side {i}: immediate of {c:?}, sent {m:?}");
                let got = &me.mem.recv[&c.wr_id][..len as usize];
                if let Some(k) = (0..len as usize).find(|&k| got[k] != pattern(wr_id, k)) {
                    panic!("side {i}: byte {k} of {c:?} differs from the message sent ({m:?})");
                }
            }
            (Message::WriteImm { imm, .. }, WcOpcode::RecvRdmaWithImm) => {
                assert_eq!(c.imm, Some(imm), "side {i}: immediate of {c:?}, sent {m:?}");
            }
            _ => panic!("side {i}: completion {c:?} where the peer sent {m:?}"),
        }
    }

    /// One operation of the script.
    fn step(&mut self, s: &mut Script<'_>) {
        let op = s.byte();
        let i = usize::from(op & 1);
        let kinds = if self.variants.reconnect { 13 } else { 12 };
        match (op >> 1) % kinds {
            // A QP left in RTR posts no sends.
            0 | 1 if i == 1 && self.variants.derived_tsn => {}
            0 | 1 => self.sides[i].post_send(s),
            2 => {
                let len = u32::from(s.u16()) % (MAX_LEN + 1);
                self.sides[i].post_recv(len);
            }
            3 => {
                let most = 1 + usize::from(s.byte() % 32);
                self.transmit(i, most);
            }
            4 | 5 | 6 => {
                // Deliver, drop, duplicate or spoil one queued packet.
                let pick = s.byte();
                let how = s.byte();
                let q = &mut self.queues[i];
                if q.is_empty() {
                    return;
                }
                // Mostly the oldest: a network reorders now and then.
                let k = if pick & 0x80 == 0 { 0 } else { usize::from(pick & 0x7f) % q.len() };
                let ce = how & 0x10 != 0;
                match how % 8 {
                    0..=2 => {
                        let p = q.remove(k).expect("index below the length");
                        self.deliver(i, &p, ce, None);
                    }
                    3 => {
                        q.remove(k);
                    }
                    4 => {
                        let p = q[k].clone();
                        self.deliver(i, &p, ce, None);
                    }
                    5 => {
                        let p = q.remove(k).expect("index below the length");
                        let cut = (usize::from(s.u16()), usize::from(s.u16()));
                        self.deliver(i, &p, ce, Some(cut));
                    }
                    6 => {
                        // A corrupted copy; the original stays queued.
                        let mut p = q[k].clone();
                        let n = 1 + s.byte() % 4;
                        for _ in 0..n {
                            let at = usize::from(s.u16());
                            let v = s.byte();
                            if !p.bytes.is_empty() {
                                let at = at % p.bytes.len();
                                p.bytes[at] ^= v;
                            }
                        }
                        self.forged = true;
                        self.deliver(i, &p, ce, None);
                    }
                    _ => {
                        let mut p = q[k].clone();
                        p.bytes.truncate(usize::from(s.u16()) % (p.bytes.len() + 1));
                        self.forged = true;
                        self.deliver(i, &p, ce, None);
                    }
                }
            }
            7 => {
                // Raw bytes from the script, to side 1 - i.
                let len = usize::from(s.byte());
                let bytes: Vec<u8> = (0..len).map(|_| s.byte()).collect();
                let src_port = 0xC000 | s.u16() & 0x3fff;
                self.forged = true;
                self.deliver(i, &Packet { bytes, src_port }, false, None);
            }
            8 => {
                let scale = [1u64, 100, 10_000, 1_000_000][usize::from(s.byte() % 4)];
                self.now += u64::from(s.u16()) * scale;
                self.fire_due(false);
            }
            9 => {
                let sub = s.byte();
                match sub % 8 {
                    0 => self.fire_due(true),
                    1 => self.sides[i].mem.faults = u32::from(s.byte() % 4),
                    2 => {
                        let side = &mut self.sides[i];
                        side.conn.resume_delivery(Instant(self.now), &mut side.mem);
                    }
                    3 => match s.byte() {
                        // Rare: the consumer takes a QP out of service.
                        0xa5 => self.sides[i].conn.set_error(),
                        // Another QP on the same shared receive queue takes
                        // its oldest WQE (MR-4.2.3): this connection must
                        // neither complete it nor miss it.
                        0x30..=0x3f => self.sides[i].sibling_takes_shared_recv(),
                        _ => {}
                    },
                    4 => match s.byte() {
                        0xa5 => self.sides[i].conn.close(),
                        0x5a if self.variants.reconnect => self.reset_one(i, s),
                        _ => {}
                    },
                    // Copies said to be under way (a driver that copies after
                    // its lock, MR-10.1.3), or done.
                    5 => self.sides[i].mem.unplaced = !self.sides[i].mem.unplaced,
                    // The receiver asks for a path to be moved (MR-6.3.5).
                    7 => self.sides[i].conn.ask_to_move(usize::from(s.byte() % 16)),
                    6 => {
                        let hint = s.u16();
                        self.sides[i].conn.set_credit_hint((hint != 0).then_some(u32::from(hint) * 64));
                    }
                    _ => {}
                }
            }
            12 => self.reconnect(s),
            _ => self.poll_completions(),
        }
    }

    /// Spec: MR-4.3.1 — an RC message whose send completed successfully was
    /// delivered: with both completion queues drained, the peer has taken
    /// its receive (it completes it before the acknowledgement that
    /// completes the send leaves).
    fn check_delivered(&self) {
        if self.forged || self.sides[0].conn.config().uc {
            return;
        }
        for (i, s) in self.sides.iter().enumerate() {
            for (_, m) in &s.messages {
                let (Message::Send { wr_id, .. } | Message::WriteImm { wr_id, .. }) = *m;
                assert!(
                    !s.succeeded.contains(&wr_id),
                    "side {i}: {m:?} completed successfully, and the peer never received it"
                );
            }
        }
    }

    /// Both QPs through RESET to RTS again ([`Variants::reconnect`]): work
    /// posted to them is forgotten (verbs: no completions), the QP numbers
    /// stay, each side starts at a new initial TSN, and the earlier pair's
    /// packets stay in the network.
    fn reconnect(&mut self, s: &mut Script<'_>) {
        // Completions already made are in the CQ, which a reset leaves alone.
        self.poll_completions();
        let Some(cfgs) = self.next_generation(s) else {
            return;
        };
        if self.trace {
            eprintln!("{:>12} reconnect: TSNs {:#x} / {:#x}", self.now, cfgs[0].initial_tsn, cfgs[1].initial_tsn);
        }
        for (k, side) in self.sides.iter_mut().enumerate() {
            side.restart(cfgs[k], self.generation);
            side.messages.clear();
        }
        // What was forged reached the earlier pair only.
        self.forged = false;
    }

    /// Side `i`'s QP alone through RESET to RTS, as for a new peer with the
    /// same numbers: its peer goes on with the earlier connection, whose
    /// packets (and the reset QP's earlier ones) stay in the network. The
    /// reset QP's messages posted before stay where they are (the peer may
    /// still take those it had not yet received); none posted after may
    /// reach the peer, nor any of the peer's reach the reset QP.
    fn reset_one(&mut self, i: usize, s: &mut Script<'_>) {
        self.poll_completions();
        let Some(cfgs) = self.next_generation(s) else {
            return;
        };
        if self.trace {
            eprintln!("{:>12} reset side {i} alone: TSN {:#x}", self.now, cfgs[i].initial_tsn);
        }
        self.sides[i].restart(cfgs[i], self.generation);
    }

    /// The configurations of a new generation: the first ones with initial
    /// TSNs far from every earlier generation's (a window is 256 packets; a
    /// script sends far fewer than 2^23), as random initial TSNs almost
    /// always are: 2^24 apart per generation, 255 generations at most.
    fn next_generation(&mut self, s: &mut Script<'_>) -> Option<[Config; 2]> {
        let jitter = u32::from(s.u16()) << 4;
        if self.generation == 255 {
            return None;
        }
        self.generation += 1;
        let shift = (self.generation << 24).wrapping_add(jitter);
        let starts = [self.first_cfgs[0].initial_tsn, self.first_cfgs[0].peer_initial_tsn].map(|t| t.wrapping_add(shift));
        Some(paired_configs(self.first_cfgs, starts, self.variants.derived_tsn))
    }

    /// A perfect network and memory from now on: everything queued is
    /// delivered in order, timers fire when due, receives are posted for every
    /// message still to come, until no work is left or the time limit.
    fn settle(&mut self) {
        let end = self.now + SETTLE_LIMIT_NS;
        for s in self.sides.iter_mut() {
            s.mem.faults = 0;
            s.mem.unplaced = false;
        }
        let mut busy_rounds = 0u32;
        let mut firings = 0u32;
        loop {
            for i in 0..2 {
                let want = self.sides[1 - i].messages.len();
                while self.sides[i].conn.state() == QpState::Rts && self.sides[i].open_recvs.len() < want {
                    if !self.sides[i].post_recv(MAX_LEN) {
                        break;
                    }
                }
                let side = &mut self.sides[i];
                side.conn.resume_delivery(Instant(self.now), &mut side.mem);
            }
            let mut quiet = false;
            for _ in 0..64 {
                self.transmit(0, usize::MAX);
                self.transmit(1, usize::MAX);
                if self.queues.iter().all(|q| q.is_empty()) {
                    quiet = true;
                    break;
                }
                for i in 0..2 {
                    while let Some(p) = self.queues[i].pop_front() {
                        self.deliver(i, &p, false, None);
                    }
                }
                self.poll_completions();
                self.check("settling");
            }
            self.poll_completions();
            let done = self.sides.iter_mut().all(|s| {
                s.sends_settled() && (s.conn.state() == QpState::Rts || s.recvs_held().is_empty())
            });
            if done && quiet {
                return;
            }
            if !quiet {
                // Still talking (e.g. one packet per round trip under a tiny
                // credit hint): no time passes until both fall quiet, which
                // the window and the work posted bound.
                busy_rounds += 1;
                assert!(busy_rounds < 20_000, "packets keep flowing with no time passing (a livelock)");
                continue;
            }
            busy_rounds = 0;
            let next = self.sides.iter().filter_map(|s| s.conn.poll_timeout()).min();
            let Some(next) = next else {
                for (i, s) in self.sides.iter_mut().enumerate() {
                    s.sends_settled();
                    let left: Vec<_> = s.open_sends.iter().collect();
                    assert!(
                        left.is_empty(),
                        "side {i} ({:?}) waits without a timer for work requests {left:?} (MR-5.5.4)",
                        s.conn.state()
                    );
                    let held = s.recvs_held();
                    assert!(
                        s.conn.state() == QpState::Rts || held.is_empty(),
                        "side {i} in the error state kept receives {held:?} unflushed (MR-7.3)"
                    );
                }
                return;
            };
            firings += 1;
            let out_of_time = next.0 > end || firings > SETTLE_LIMIT_FIRINGS;
            if out_of_time && self.forged {
                // A forged packet inside the window can wedge a message (a cut
                // copy of a packet takes its TSN, and the real one is then a
                // duplicate): the threat model asks an attacker to guess the
                // window first (MR-9.1.3), and the checksums of UDP catch
                // corruption (MR-2.1.2). Only the checks above apply then.
                return;
            }
            assert!(
                !out_of_time,
                "not settled after {} s or {SETTLE_LIMIT_FIRINGS} timer firings of perfect network: open sends {:?} / {:?}, open receives {:?} / {:?}, \
                 states {:?} / {:?}, TSNs {:?} / {:?}; counters {:?} / {:?}",
                SETTLE_LIMIT_NS / 1_000_000_000,
                self.sides[0].open_sends,
                self.sides[1].open_sends,
                self.sides[0].open_recvs,
                self.sides[1].open_recvs,
                self.sides[0].conn.state(),
                self.sides[1].conn.state(),
                self.sides[0].conn.tsn_state(),
                self.sides[1].conn.tsn_state(),
                self.sides[0].conn.stats(),
                self.sides[1].conn.stats()
            );
            self.now = self.now.max(next.0);
            self.fire_due(false);
        }
    }
}

/// The oldest message `peer` posted that side `i` has not received, taken off
/// for `i`'s receive completion `c`: posted in `epoch`, the generation of
/// `i`'s connection (a message reaches a peer only from the connection it is
/// part of).
fn next_message(peer: &mut Side, epoch: u32, i: usize, c: &Completion) -> Option<Message> {
    let (posted_in, m) = peer.messages.pop_front()?;
    assert_eq!(
        posted_in, epoch,
        "side {i}: receive completion {c:?} of {m:?}, which the peer posted to a connection this one is not part of"
    );
    Some(m)
}

/// The two sides' configurations with side 0 starting at `starts[0]`
/// and side 1 at `starts[1]` (or, as a responder left in RTR, at the TSN
/// derived from the QP numbers and side 0's start, MR-7.1.5).
fn paired_configs(mut cfgs: [Config; 2], starts: [u32; 2], derived_tsn: bool) -> [Config; 2] {
    cfgs[0].initial_tsn = starts[0];
    cfgs[1].peer_initial_tsn = starts[0];
    // Side 0 is told `starts[1]` either way; a responder that never learnt
    // it sends from the derived TSN instead.
    cfgs[0].peer_initial_tsn = starts[1];
    cfgs[1].initial_tsn = if derived_tsn {
        qpn_derived_tsn(cfgs[1].local_qpn, cfgs[1].remote_qpn, starts[0])
    } else {
        starts[1]
    };
    // As the kernel driver configures every QP (MR-7.1.5).
    for c in cfgs.iter_mut() {
        c.accept_derived_peer_tsn = derived_tsn;
    }
    cfgs
}

/// Runs one input of the `pair` target: no [`Variants`].
pub(crate) fn run(data: &[u8]) {
    run_with(Variants::default(), data);
}

/// Runs one input of the `pair_variants` target: its first byte says which
/// [`Variants`], the rest is as [`run`]'s input.
pub(crate) fn run_variants(data: &[u8]) {
    let (first, rest) = data.split_first().unwrap_or((&0, &[]));
    run_with(Variants::from_byte(*first), rest);
}

fn run_with(variants: Variants, data: &[u8]) {
    let mut s = Script { bytes: data };
    let head = s.byte();
    let side_bytes = [s.byte(), s.byte()];
    let paths = side_bytes.map(|b| 1 + b % MAX_PATHS as u8);
    let mtu = [256u32, 1024, 4096][usize::from(head % 3)];
    // Now and then the two ends are given different MTUs (verbs attributes
    // alone, no parameter block to agree on the smaller, MR-7.1.4).
    let mtus = side_bytes.map(|b| if b & 0x08 != 0 { [256u32, 1024, 4096][usize::from(b >> 4) % 3] } else { mtu });
    let mut cfgs = [Config::test_pair(1, 2), Config::test_pair(2, 1)];
    for (k, c) in cfgs.iter_mut().enumerate() {
        c.mtu = mtus[k];
        c.num_paths = paths[k];
        // Told the peer's count, or left to assume its own (MR-6.1.3).
        c.peer_num_paths = if head & 4 != 0 { paths[1 - k] } else { 0 };
        c.rnr_retry = if head & 8 != 0 { 7 } else { 2 };
        c.retry_cnt = if head & 16 != 0 { 7 } else { 3 };
        if head & 32 != 0 {
            c.reply_wait = Duration::from_nanos(1_000);
        }
        if head & 64 != 0 {
            c.ack_every = 1;
        }
        c.uc = head & 128 != 0;
        if let Some(n) = variants.max_rd_atomic[k] {
            c.max_rd_atomic = n;
        }
        if variants.tight_cc {
            c.cc.target_qdelay_ns = 1_000;
        }
    }
    if variants.derived_tsn {
        cfgs = paired_configs(cfgs, [cfgs[0].initial_tsn, cfgs[1].initial_tsn], true);
    }
    let mut pair = Pair {
        variants,
        first_cfgs: cfgs,
        generation: 0,
        sides: [Side::new(cfgs[0], 0, &variants), Side::new(cfgs[1], 1, &variants)],
        queues: [VecDeque::new(), VecDeque::new()],
        now: 1_000_000,
        forged: false,
        buf: Vec::new(),
        trace: tracing(),
    };
    let longest = pair.sides.iter().map(|s| s.conn.max_packet_len()).max().unwrap_or(0);
    pair.buf = vec![0; longest];
    let mut ops = 0;
    while !s.is_empty() && ops < MAX_OPS {
        pair.step(&mut s);
        pair.check("a scripted step");
        ops += 1;
    }
    pair.poll_completions();
    pair.settle();
}
