// SPDX-License-Identifier: GPL-2.0

//! The data path of one QP: the verbs send and receive queues (work requests with
//! their scatter/gather lists, as deep as the consumer asked for), the protocol
//! core's [`Connection`] for RC, datagram handling for UD, and the glue between them:
//! which posted work the connection holds, how its byte-moving callbacks reach
//! registered memory, and how its completions become verbs completions.
//!
//! Safe code. It runs under the QP's engine spinlock (the posting verbs may be called
//! in atomic context by kernel consumers, e.g. ib_mad posts under its own spinlock),
//! so nothing here sleeps or allocates; the FFI layer provides packets, time and an
//! [`Io`] that transmits (GFP_ATOMIC) and completes.

use crate::cq::{Grh, Wc};
use crate::ffi::{LaterCopies, TxFrags, UserQueues};
use crate::ids::IdTable;
use crate::mr::{Accessor, Bind, FaultAt, MrTable, Need, PdId, QpId};
use crate::net::{Counter, Counters};
use crate::proto::{
    self, ud, AtomicOp, Completion, Config, Connection, Duration, Ecn, Instant, LocalMemory,
    MemError, PostError, RecvWr, Responder, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use crate::qp::{QpCaps, QpType};
use crate::srq::Srq;
use kernel::prelude::*;

/// Bytes in front of every UD receive buffer's payload that hold the GRH (IBTA).
pub(crate) const GRH_LEN: usize = 40;

/// Largest payload of one datagram the engine builds with the largest verbs MTU.
const TX_BUF: usize = proto::connection::MAX_HEADER + 4096;

/// Bytes of the staging buffer a run builds packets in, for connections that may
/// use an `rc_mtu` of up to `max_rc_mtu` (0: verbs MTUs only). The module keeps one
/// such buffer per CPU (`ffi::Staging`), sized for the `rc_mtu` parameter.
pub(crate) const fn staging_len(max_rc_mtu: u32) -> usize {
    let rc = proto::connection::MAX_HEADER + max_rc_mtu as usize;
    if rc > TX_BUF { rc } else { TX_BUF }
}

/// Receive WQEs a QP on an SRQ can hold: those of the messages that have arrived and
/// not yet completed. A QP takes a WQE from the SRQ only when a message needs one
/// (spec MR-4.2.3, [`QpMemory::take_shared_recv`]), never ahead: a WQE taken ahead
/// is committed to that QP and starves the others on the SRQ into RNR NAKs
/// (rdma-core's test_rc_srq_traffic: two QPs, one SRQ, one WQE per QP).
const SRQ_HELD: usize = proto::connection::RQ_DEPTH;

/// Largest UD payload (the largest IB MTU).
const UD_MAX_PAYLOAD: u32 = 4096;
/// The bytes an ATOMIC_WRITE stores (spec MR-4.4.6).
const ATOMIC_WRITE_LEN: usize = 8;

/// Largest RC packet built in the staging buffer and copied into an skb of its own
/// size; a connection whose last packet was larger builds the next in the skb it
/// leaves in ([`Engine::run_rc`]).
const SMALL_TX: usize = 1024;

/// Packets one run of the work transmits before yielding to other QPs (it requeues
/// itself when more are ready).
const TX_BUDGET: usize = 64;

/// One scatter/gather element (`struct ib_sge`).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// Destination of a UD send: the peer's IP address (a GID) and QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UdDest {
    pub(crate) dgid: [u8; 16],
    pub(crate) qpn: u32,
    pub(crate) qkey: u32,
}

/// A send work request as the FFI layer decoded it.
pub(crate) struct SendRequest<'a> {
    pub(crate) wr_id: u64,
    pub(crate) op: WrOpcode,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) fence: bool,
    pub(crate) sges: &'a [Sge],
    /// Inline payload, already copied into the kernel.
    pub(crate) inline: Option<&'a [u8]>,
    pub(crate) remote_va: u64,
    pub(crate) rkey: u32,
    /// Immediate data (host order) or the R_Key to invalidate.
    pub(crate) imm: u32,
    pub(crate) compare: u64,
    pub(crate) swap_add: u64,
    /// The length of a FLUSH's range (`op` is `Flush`; its bits are in `imm`).
    pub(crate) flush_len: u32,
    pub(crate) ud: Option<UdDest>,
    /// A memory operation the device executes itself, in send-queue order
    /// (`op` and the data fields are then unused).
    pub(crate) local: Option<LocalOp>,
}

impl SendRequest<'static> {
    /// A request the device executes itself (`op`), carrying no data.
    pub(crate) fn local(wr_id: u64, signaled: bool, fence: bool, op: LocalOp) -> Self {
        SendRequest {
            wr_id,
            op: WrOpcode::Send,
            signaled,
            solicited: false,
            fence,
            sges: &[],
            inline: None,
            remote_va: 0,
            rkey: 0,
            imm: 0,
            compare: 0,
            swap_add: 0,
            flush_len: 0,
            ud: None,
            local: Some(op),
        }
    }
}

/// The wire's Compare and Swap/Add operands of an atomic from verbs' fields: CAS
/// compares with `compare_add` and swaps in `swap`; FAA adds `compare_add`, and its
/// Compare field is zero (spec MR-3.3.4).
pub(crate) fn atomic_operands(op: WrOpcode, compare_add: u64, swap: u64) -> (u64, u64) {
    if op == WrOpcode::AtomicCas { (compare_add, swap) } else { (0, compare_add) }
}

/// Work requests that never reach the wire (fast-registration MRs, memory windows).
#[derive(Clone, Copy, Debug)]
pub(crate) enum LocalOp {
    /// IB_WR_REG_MR: register the MR's staged page list under `key` with `access`.
    RegMr { key: u32, access: u32 },
    /// IB_WR_LOCAL_INV: invalidate `key` (a fast-registration MR or type 2 window).
    LocalInv { key: u32 },
    /// IB_WR_BIND_MW: bind a memory window (spec MR-9.2.4).
    BindMw(Bind),
}

/// What the engine asks of the outside world.
pub(crate) trait Io {
    /// A buffer the packet is sent from (an skb's data area), so a packet is built
    /// where it leaves from rather than built elsewhere and copied.
    type TxBuf: core::ops::DerefMut<Target = [u8]>;
    /// A transmit buffer of at least `len` bytes; `None` when out of memory.
    fn tx_buf(&mut self, len: usize) -> Option<Self::TxBuf>;
    /// Sends the first `len` bytes of `buf` (everything after the UDP header) to
    /// `dgid` from UDP source port `src_port`. False if it could not be sent (no
    /// route, no memory): to the protocol that is a lost packet.
    fn transmit_buf(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, buf: Self::TxBuf, len: usize) -> bool;
    /// Sends a copy of `pkt`, as [`Io::transmit_buf`].
    fn transmit(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, pkt: &[u8]) -> bool {
        let Some(buf) = self.tx_copy(pkt) else { return false };
        self.transmit_buf(dgid, src_port, ecn, buf, pkt.len())
    }
    /// A transmit buffer holding a copy of `pkt`.
    fn tx_copy(&mut self, pkt: &[u8]) -> Option<Self::TxBuf> {
        let mut buf = self.tx_buf(pkt.len())?;
        buf.get_mut(..pkt.len())?.copy_from_slice(pkt);
        Some(buf)
    }
    /// Sends an ACK packet, as [`Io::transmit_buf`]; since its order against the
    /// QP's other packets does not matter (spec MR-10.3.4), it may leave once the
    /// engine lock is released, and the QP's next packet need not wait for it.
    fn transmit_ack(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, buf: Self::TxBuf, len: usize) -> bool {
        self.transmit_buf(dgid, src_port, ecn, buf, len)
    }
    /// Sends `t`, written in `buf`, through [`Io::transmit_ack`] or
    /// [`Io::transmit_buf`] as it is an ACK or not.
    fn transmit_as(&mut self, dgid: &[u8; 16], t: &proto::Transmit, buf: Self::TxBuf) -> bool {
        if t.ack {
            self.transmit_ack(dgid, t.src_port, t.ecn, buf, t.len)
        } else {
            self.transmit_buf(dgid, t.src_port, t.ecn, buf, t.len)
        }
    }
    /// True if payloads may leave as references to the pages of the memory they
    /// come from ([`TxFrags`], zero-copy transmit; the `zero_copy_tx` parameter).
    fn sends_pages(&self) -> bool {
        false
    }
    /// Sends the packet made of `header` and the payload `frags` holds, as
    /// [`Io::transmit_buf`]. False if it could not be sent; `frags` then still
    /// holds the payload if no skb took it.
    fn transmit_pages(&mut self, _dgid: &[u8; 16], _src_port: u16, _ecn: Ecn, _header: &[u8], _frags: &mut TxFrags) -> bool {
        false
    }
    /// Delivers a completion to the send (`recv == false`) or receive CQ.
    fn complete(&mut self, recv: bool, wc: Wc, solicited: bool);
}

/// Fewest payload bytes worth sending by reference: below that, taking page
/// references and building fragments costs about what copying does.
const PAGES_MIN: usize = 2048;

/// A received MetaRoCE datagram and what the lower headers said about it.
pub(crate) struct Received<'a> {
    /// Everything after the UDP header, or its first piece (holding the headers).
    pub(crate) bytes: &'a [u8],
    /// The datagram's further pieces (page fragments), in order; only for a QP that
    /// [takes them](Engine::takes_pieces).
    pub(crate) more: &'a [&'a [u8]],
    pub(crate) src_port: u16,
    /// The IP ECN field was CE.
    pub(crate) ce: bool,
    /// Source and destination address; read only for a UD QP (its GRH).
    pub(crate) addrs: Option<IpPair>,
}

/// The addresses of a received datagram.
#[derive(Clone, Copy, Debug)]
pub(crate) enum IpPair {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl IpPair {
    /// The destination as a GID (IPv4-mapped for IPv4).
    pub(crate) fn dst_gid(&self) -> [u8; 16] {
        match self {
            IpPair::V4(_, d) => {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(d);
                g
            }
            IpPair::V6(_, d) => *d,
        }
    }
}

/// The IPv4 address inside an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub(crate) fn ipv4_of(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let mapped = gid[..10].iter().all(|b| *b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    mapped.then(|| [gid[12], gid[13], gid[14], gid[15]])
}

/// Device resources the engine borrows for one call.
pub(crate) struct Shared<'a> {
    pub(crate) mrs: &'a MrTable,
    pub(crate) keys: &'a IdTable,
    /// The SRQ the QP receives from, if any.
    pub(crate) srq: Option<&'a Srq>,
}

/// Connection parameters from `modify_qp` (RTR/RTS).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectParams {
    pub(crate) remote_qpn: u32,
    pub(crate) remote_gid: [u8; 16],
    /// `None` until the consumer set it (a responder left in RTR).
    pub(crate) sq_psn: Option<u32>,
    pub(crate) rq_psn: u32,
    /// Payload bytes per packet (verbs' `path_mtu`).
    pub(crate) mtu: u32,
    /// Payload bytes per packet an RC connection may use instead when larger
    /// (`rc_mtu`; 0: none).
    pub(crate) rc_mtu: u32,
    pub(crate) num_paths: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: u8,
    /// Verbs' Local ACK Timeout code (4.096 µs × 2^timeout; 0: none given).
    pub(crate) timeout: u8,
    /// The device's timers and congestion control (module parameters).
    pub(crate) tuning: ConnTuning,
}

/// Timers and congestion control of a device's connections: the protocol's
/// configurable parameters (spec MR-5.4.1, MR-5.4.6, MR-5.5, MR-8.6.1) that verbs
/// has no attribute for, set for all of the module's connections by its
/// parameters (rdma_metaroce.4). Times in µs, windows in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnTuning {
    /// The RTT a path is taken to have before its first sample.
    pub(crate) initial_rtt_us: u32,
    /// Floor of a path's retransmission timeout.
    pub(crate) min_path_rto_us: u32,
    /// Floor of the connection's retransmission timeout.
    pub(crate) min_rto_us: u32,
    /// Ceiling of both timeouts after backoff.
    pub(crate) max_rto_us: u32,
    /// Longest wait of a delayed acknowledgement.
    pub(crate) ack_delay_us: u32,
    /// Packets of a path after which an acknowledgement goes at once.
    pub(crate) ack_every: u8,
    /// How long an acknowledgement may wait for a reply to carry it (at most
    /// `ack_delay_us`).
    pub(crate) reply_wait_us: u32,
    /// The connection's first window, split over its paths.
    pub(crate) init_window: u32,
    /// Largest window of one path.
    pub(crate) max_window: u32,
    /// Queueing delay above a path's base RTT read as congestion.
    pub(crate) cc_target_delay_us: u32,
    /// ECN gain g = 2^-shift.
    pub(crate) ecn_gain_shift: u8,
}

impl ConnTuning {
    /// The module's defaults. A software device on a host stack: scheduling, not
    /// the wire, dominates the round trip, and timers have jiffy resolution, so
    /// timeouts sit well above scheduling noise. Datagrams are handled one at a
    /// time as they arrive, so an ACK is due after `ack_every` packets of a path or
    /// at once on the last packet of a message (ACK_REQ, MR-5.4.1); the
    /// delayed-ACK timer only covers a burst that ends short of that. The windows
    /// and ECN gain are the protocol's defaults (MR-8.6.1); the delay target is
    /// above the milliseconds host scheduling adds.
    pub(crate) const DEFAULT: ConnTuning = ConnTuning {
        initial_rtt_us: 500,
        min_path_rto_us: 10_000,
        min_rto_us: 50_000,
        max_rto_us: 500_000,
        ack_delay_us: 500,
        ack_every: 4,
        reply_wait_us: 0,
        init_window: 128 * 1024,
        max_window: 4 * 1024 * 1024,
        cc_target_delay_us: 1000,
        ecn_gain_shift: 4,
    };

    /// Why these values cannot run a connection (the name of the first bad one
    /// and its allowed range), if they cannot.
    pub(crate) fn check(&self) -> core::result::Result<(), &'static str> {
        const SECOND: u32 = 1_000_000;
        let t = self;
        let ranges: [(bool, &'static str); 11] = [
            ((1..=10 * SECOND).contains(&t.initial_rtt_us), "initial_rtt_us: 1..10000000"),
            ((1..=60 * SECOND).contains(&t.min_path_rto_us), "min_path_rto_us: 1..60000000"),
            ((1..=60 * SECOND).contains(&t.min_rto_us), "min_rto_us: 1..60000000"),
            (
                (t.min_rto_us.max(t.min_path_rto_us)..=600 * SECOND).contains(&t.max_rto_us),
                "max_rto_us: min_rto_us and min_path_rto_us..600000000",
            ),
            ((1..=SECOND).contains(&t.ack_delay_us), "ack_delay_us: 1..1000000"),
            (t.ack_every >= 1, "ack_every: 1..255"),
            (t.reply_wait_us <= t.ack_delay_us, "reply_wait_us: 0..ack_delay_us"),
            // Windows below a packet are taken as one packet (MR-8.2.1).
            ((1024..=256 << 20).contains(&t.max_window), "max_window: 1024..268435456"),
            ((1024..=256 << 20).contains(&t.init_window), "init_window: 1024..268435456"),
            ((1..=10 * SECOND).contains(&t.cc_target_delay_us), "cc_target_delay_us: 1..10000000"),
            (t.ecn_gain_shift <= 16, "ecn_gain_shift: 0..16"),
        ];
        match ranges.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err(why),
            None => Ok(()),
        }
    }
}

/// Counters the engine adds to (drained into the device's counters by
/// [`Engine::drain_counters`], with the connection's statistics).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct EngineCounters {
    pub(crate) tx_packets: u64,
    pub(crate) tx_bytes: u64,
    pub(crate) tx_failed: u64,
    /// Sent with the payload's pages attached ([`TxFrags`]).
    pub(crate) tx_zero_copy: u64,
    pub(crate) rx_ud_dropped: u64,
    /// Datagrams routed here on their headers that did not parse (the
    /// connection counts its own in its statistics).
    pub(crate) rx_malformed: u64,
    pub(crate) access_errors: u64,
    /// Accesses that found on-demand memory not resident (spec MR-9.2.5).
    pub(crate) odp_faults: u64,
}

#[derive(Clone, Copy)]
struct SqSlot {
    wr_id: u64,
    signaled: bool,
    /// The request as given to the connection (its `wr_id` is the slot index).
    wr: SendWr,
    nsge: u16,
    inline_len: u16,
    extra: SlotExtra,
    done: Option<Completion>,
}

/// What a send slot holds besides its request: a UD datagram's destination, or a
/// memory operation the device executes itself (connected QPs only). One field
/// for both keeps every slot of every QP as small as the larger of the two.
#[derive(Clone, Copy)]
enum SlotExtra {
    None,
    Ud(UdDest),
    Local(LocalOp),
}

#[derive(Clone, Copy)]
struct RqSlot {
    wr_id: u64,
    len: u32,
    nsge: u16,
    done: Option<Completion>,
}

/// Ring positions: `head` = oldest incomplete, `fed` = next to hand to the
/// connection, `tail` = next free (all wrapping counters).
#[derive(Clone, Copy, Default)]
struct Ring {
    head: u32,
    fed: u32,
    tail: u32,
    depth: u32,
}

impl Ring {
    fn len(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }
    fn idx(&self, i: u32) -> usize {
        (i % self.depth.max(1)) as usize
    }
    fn clear(&mut self) {
        self.head = 0;
        self.fed = 0;
        self.tail = 0;
    }
}

/// The verbs queues' storage, fixed at QP creation.
struct Queues {
    sq: KVec<Option<SqSlot>>,
    sq_sge: KVec<Sge>,
    sq_inline: KVec<u8>,
    max_send_sge: usize,
    max_inline: usize,
    /// Bytes of `sq_inline` per send slot: `max_inline`, but room for an
    /// ATOMIC_WRITE's operand at least.
    inline_stride: usize,
    sqr: Ring,
    rq: KVec<Option<RqSlot>>,
    rq_sge: KVec<Sge>,
    max_recv_sge: usize,
    rqr: Ring,
}

fn filled<T: Clone>(v: T, n: usize) -> Result<KVec<T>> {
    Ok(KVec::from_elem(v, n, GFP_KERNEL)?)
}

/// The engine of one QP.
pub(crate) struct Engine {
    ty: QpType,
    qpn: u32,
    /// The QP as its memory accesses name it (protection domain, identity).
    accessor: Accessor,
    q: Queues,
    /// RC only: the transport state, allocated at creation (zero-filled, then reset
    /// when the QP is connected) so connecting never allocates.
    conn: Option<KBox<Connection>>,
    connected: bool,
    /// Verbs state as the data path needs it.
    can_send: bool,
    can_recv: bool,
    errored: bool,
    remote_gid: [u8; 16],
    /// `IB_ACCESS_REMOTE_*` rights the QP grants (`qp_access_flags`).
    access: u32,
    qkey: u32,
    mtu: u32,
    src_port: u16,
    /// Bytes of the staging buffer its runs use ([`staging_len`]): UD packets, small
    /// RC packets, and any packet whose skb could not be allocated are built there.
    /// The buffer is the running CPU's, handed to [`Engine::run`]: one per QP, of the
    /// largest packet, cost every idle QP its size.
    tx_len: usize,
    /// The last RC packet was larger than [`SMALL_TX`]: build the next in its skb
    /// (unless its payload went out by reference, see `tx_by_ref`).
    tx_large: bool,
    /// The last large RC packet's payload went out by reference ([`TxFrags`]):
    /// build the next in the staging buffer too, taking its pages.
    tx_by_ref: bool,
    /// Every send completes visibly (`IB_SIGNAL_ALL_WR`).
    sig_all: bool,
    /// Receives come from an SRQ, one WQE per arriving message ([`take_from_srq`]).
    on_srq: bool,
    counters: EngineCounters,
    /// The connection's statistics at the last `drain_counters` (reset on connect;
    /// only the fields it reports are kept up to date).
    last_stats: proto::Stats,
    /// The sum of those fields then (see `drain_counters`).
    last_stats_sum: u64,
    /// The connection's next deadline as the last run ended (see `run_rc`).
    next_deadline: Option<Instant>,
    /// Datagrams were handed in, or copies ended, since the last run: the next
    /// one retires completions before it transmits (see `run_rc`).
    retire_first: bool,
    /// The send/receive rings a process posts into, for a user RC QP whose provider
    /// maps them ([`Engine::pull_posted`]); `None`: work arrives through `post_*`.
    user: Option<UserQueues>,
    /// Nanoseconds the data path has held this engine (its runs, from the first read
    /// of the clock under the lock to the last) and how many runs that was: how
    /// close the QP is to being bound by its own lock (`held_ns` per second of
    /// wall time near 1e9), for `rdma resource show qp -dd`.
    held_ns: u64,
    runs: u64,
    /// Memory a run found not resident (spec MR-9.2.5), waiting for the QP's fault
    /// work ([`Engine::take_fault`]), which runs the QP again once it is in.
    fault: Option<FaultAt>,
    /// Runs whose copies into memory are under way after they released the engine
    /// (spec MR-10.1.3, [`LaterCopies`]): while any are, no message is delivered and
    /// no completion is handed to the consumer. Not touched by a reset: the runs
    /// count themselves out whatever the QP's state.
    copies_out: u32,
}

/// Total byte length of a scatter/gather list (`EINVAL` beyond 2^31).
fn sge_len(sges: &[Sge]) -> Result<u32> {
    let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    u32::try_from(total).ok().filter(|t| *t <= proto::connection::MAX_MSG).ok_or(EINVAL)
}

impl Engine {
    /// An engine for a new QP (process context: allocates the queues and, for RC, the
    /// connection).
    ///
    /// `port_seed` picks the QP's UDP source ports (random bits from the caller).
    /// `srq_max_sge`: the QP receives from an SRQ whose WQEs have up to this many
    /// SGEs; it then keeps a few of them at a time in its own receive ring.
    /// `max_rc_mtu`: the largest `rc_mtu` its connections may use (sizes the
    /// transmit buffer; 0: verbs MTUs only).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ty: QpType,
        qpn: u32,
        pd: PdId,
        caps: &QpCaps,
        sig_all: bool,
        port_seed: u16,
        srq_max_sge: Option<u32>,
        conn: Option<KBox<Connection>>,
        max_rc_mtu: u32,
    ) -> Result<Self> {
        let sd = caps.max_send_wr.max(1) as usize;
        let (rd, rse) = match srq_max_sge {
            Some(n) => (SRQ_HELD, n.max(1) as usize),
            None => (caps.max_recv_wr.max(1) as usize, caps.max_recv_sge.max(1) as usize),
        };
        let sse = caps.max_send_sge.max(1) as usize;
        let inl = caps.max_inline_data as usize;
        let inline_stride = inl.max(ATOMIC_WRITE_LEN);
        let q = Queues {
            sq: filled(None, sd)?,
            sq_sge: filled(Sge::default(), sd * sse)?,
            sq_inline: filled(0u8, sd * inline_stride)?,
            max_send_sge: sse,
            max_inline: inl,
            inline_stride,
            sqr: Ring { depth: sd as u32, ..Ring::default() },
            rq: filled(None, rd)?,
            rq_sge: filled(Sge::default(), rd * rse)?,
            max_recv_sge: rse,
            rqr: Ring { depth: rd as u32, ..Ring::default() },
        };
        Ok(Self {
            ty,
            qpn,
            accessor: Accessor { pd, qp: QpId::new() },
            q,
            conn,
            connected: false,
            can_send: false,
            can_recv: false,
            errored: false,
            remote_gid: [0; 16],
            access: 0,
            qkey: 0,
            mtu: 1024,
            // Dynamic port range (RFC 6335), a random base per QP.
            src_port: 0xC000 | (port_seed & 0x3fff),
            tx_len: staging_len(max_rc_mtu),
            tx_large: false,
            tx_by_ref: false,
            sig_all,
            on_srq: srq_max_sge.is_some(),
            counters: EngineCounters::default(),
            last_stats: proto::Stats::default(),
            last_stats_sum: 0,
            next_deadline: None,
            retire_first: false,
            user: None,
            held_ns: 0,
            runs: 0,
            fault: None,
            copies_out: 0,
        })
    }

    /// True if received datagrams may come in pieces ([`Received::more`]): a
    /// connection places each piece where it belongs; a UD datagram is taken whole.
    pub(crate) fn takes_pieces(&self) -> bool {
        self.ty.connected()
    }

    pub(crate) fn errored(&self) -> bool {
        self.errored
    }

    /// Gives the engine the rings its process posts into (at creation).
    pub(crate) fn attach_user_queues(&mut self, u: UserQueues) {
        self.user = Some(u);
    }

    /// The QP's work requests are posted through mapped rings.
    pub(crate) fn has_user_queues(&self) -> bool {
        self.user.is_some()
    }

    /// Takes what the process posted into its mapped rings (see
    /// [`UserQueues::pull`]).
    pub(crate) fn pull_posted(&mut self, io: &mut impl Io) {
        // Looked at first: moving the rings out of the engine and back (below)
        // costs more than the look, and most calls find nothing new.
        if !self.user.as_ref().is_some_and(|u| u.has_posted()) {
            return;
        }
        if let Some(mut u) = self.user.take() {
            u.pull(self, io);
            self.user = Some(u);
        }
    }

    /// Tells the process which ring slots completed work has freed.
    pub(crate) fn publish_consumed(&self) {
        if let Some(u) = self.user.as_ref() {
            u.publish(self);
        }
    }

    /// `post_send` would take a request in this state.
    pub(crate) fn accepts_sends(&self) -> bool {
        self.can_send || self.errored
    }

    /// `post_recv` would take a request in this state.
    pub(crate) fn accepts_recvs(&self) -> bool {
        (self.can_recv || self.errored) && !self.on_srq
    }

    /// Free slots in the send queue.
    pub(crate) fn send_room(&self) -> u32 {
        self.q.sqr.depth - self.q.sqr.len()
    }

    /// Free slots in the receive queue.
    pub(crate) fn recv_room(&self) -> u32 {
        self.q.rqr.depth - self.q.rqr.len()
    }

    /// Work requests held (posted, not yet completed): (send, receive).
    pub(crate) fn held(&self) -> (u32, u32) {
        (self.q.sqr.len(), self.q.rqr.len())
    }

    /// A work request from a mapped ring that `post_send`/`post_recv` refused: it
    /// completes with a local QP operation error and the QP goes to the error state
    /// (verbs: a malformed WQE found by the device is a local QP operation error).
    pub(crate) fn reject_posted(&mut self, io: &mut impl Io, recv: bool, wr_id: u64) {
        let opcode = if recv { WcOpcode::Recv } else { WcOpcode::Send };
        io.complete(recv, wc_of(self.qpn, wr_id, &Completion::new(wr_id, WcStatus::LocQpOpErr, opcode, 0)), false);
        self.to_error();
    }

    /// Deadlines under a jiffy must be kept to the microsecond: an acknowledgement
    /// waits for a reply only `reply_wait` long (spec MR-5.4.6). Otherwise the
    /// engine's short deadlines (the delayed-ACK and tail-probe timers) may run
    /// late by up to a jiffy, as they always have, sparing a timer reprogramming
    /// per packet.
    pub(crate) fn precise_timers(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.config().reply_wait.as_nanos() > 0)
    }

    /// Adds what this QP counted since the last call to the device's counters `to`:
    /// the engine's own counts, and the connection's statistics as deltas. Field by
    /// field, in place: this ends every run, and moving whole copies of the counters
    /// and of two statistics structs each time was a visible part of a run.
    ///
    /// Most runs change only the packet counts: the rest is looked at through one
    /// comparison each for the engine's rare counts (their OR) and for the
    /// connection's statistics (their sum, which moves whenever one of them does:
    /// every one only grows, and a new connection starts them, and the sum kept
    /// with them, again at zero). Under emulation every branch ends a translated
    /// block, and the field-by-field tests of every run were 4% of the module's
    /// instructions in an `ib_send_lat` (tools/insn-count).
    pub(crate) fn drain_counters(&mut self, to: &Counters) {
        // Written out, not looped over a table: the table of (counter, field)
        // pairs was built on the stack at every run's end, which the emulated
        // CPUs of the test VMs made a visible part of a run.
        macro_rules! take {
            ($($counter:ident: $field:ident),* $(,)?) => {
                $( to.add_nonzero(Counter::$counter, core::mem::take(&mut self.counters.$field)); )*
            };
        }
        take!(TxPackets: tx_packets, TxBytes: tx_bytes);
        let c = &self.counters;
        if (c.tx_failed | c.tx_zero_copy | c.rx_ud_dropped | c.rx_malformed | c.access_errors | c.odp_faults) != 0 {
            take!(
                TxFailed: tx_failed,
                TxZeroCopy: tx_zero_copy,
                UdDropped: rx_ud_dropped,
                RxMalformed: rx_malformed,
                AccessErrors: access_errors,
                OdpFaults: odp_faults,
            );
        }
        let Some(conn) = self.conn.as_ref().filter(|_| self.connected) else { return };
        let now = conn.stats();
        // The statistics reported below, each once: in the sum that says whether any
        // moved, and as a delta.
        macro_rules! reported {
            ($m:ident) => {
                $m!(
                    Retransmits: tx_retx,
                    PathTimeouts: path_timeouts,
                    PathTimeoutsOvertaken: path_timeouts_overtaken,
                    RtoTimeouts: rto,
                    TailProbes: tlp,
                    PathProbes: tx_probes,
                    SackRecovered: lost_detected,
                    RnrNaks: rnr_naks,
                    RxDuplicates: rx_dup,
                    EcnMarked: rx_ce,
                    OutOfOrder: rx_out_of_order,
                    AcksSent: tx_acks,
                    AcksPiggybacked: tx_piggybacked,
                    Repaths: repaths,
                    CongestionRepaths: congestion_repaths,
                    MovedPaths: moved_paths,
                    StaleReadNaks: stale_read_naks,
                    UcDropped: uc_dropped,
                )
            };
        }
        macro_rules! sum {
            ($($counter:ident: $field:ident),* $(,)?) => {
                now.rx_malformed.wrapping_add(now.rx_invalid) $( .wrapping_add(now.$field) )*
            };
        }
        let sum = reported!(sum);
        if sum == self.last_stats_sum {
            return;
        }
        self.last_stats_sum = sum;
        let last = &mut self.last_stats;
        // The device counts the datagrams that do not parse as malformed, and
        // `rx_invalid` for the well-formed ones a connection refused; the
        // connection's `rx_invalid` has both.
        let malformed = now.rx_malformed.wrapping_sub(last.rx_malformed);
        to.add_nonzero(Counter::RxMalformed, malformed);
        to.add_nonzero(Counter::RxInvalid, now.rx_invalid.wrapping_sub(last.rx_invalid).wrapping_sub(malformed));
        (last.rx_malformed, last.rx_invalid) = (now.rx_malformed, now.rx_invalid);
        macro_rules! delta {
            ($($counter:ident: $field:ident),* $(,)?) => {
                $(
                    to.add_nonzero(Counter::$counter, now.$field.wrapping_sub(last.$field));
                    last.$field = now.$field;
                )*
            };
        }
        reported!(delta);
    }

    /// Memory a run found not resident (spec MR-9.2.5), for the QP's fault work to
    /// bring in (process context: the caller drops it there).
    pub(crate) fn take_fault(&mut self) -> Option<FaultAt> {
        self.fault.take()
    }

    /// A fault is waiting for the QP's fault work.
    pub(crate) fn has_fault(&self) -> bool {
        self.fault.is_some()
    }

    /// `qp_access_flags` and the Q_Key as last set by `modify_qp`.
    pub(crate) fn set_access(&mut self, access: u32, qkey: u32) {
        self.access = access;
        self.qkey = qkey;
    }

    /// INIT: receives may be posted (and are kept until RTR).
    pub(crate) fn to_init(&mut self) {
        self.can_recv = true;
    }

    /// The connection configuration for the verbs attributes in `p`.
    fn config_for(&self, p: &ConnectParams) -> Config {
        Self::connection_config(self.qpn, self.ty, self.tx_len, self.src_port, p)
    }

    /// [`Self::config_for`] of a QP with number `qpn` and type `ty` that builds
    /// packets of up to `tx_len` bytes and sends from UDP ports from `src_port`.
    fn connection_config(qpn: u32, ty: QpType, tx_len: usize, src_port: u16, p: &ConnectParams) -> Config {
        // Spec: MR-7.1.5 — without an sq_psn, send from the TSN derived from the
        // QPNs and the peer's own initial TSN (our rq_psn); and accept a peer
        // that had to do the same.
        let first = p.sq_psn.unwrap_or_else(|| proto::qpn_derived_tsn(qpn, p.remote_qpn, p.rq_psn));
        let mut cfg = Config::new(qpn, p.remote_qpn, first, p.rq_psn);
        cfg.accept_derived_peer_tsn = true;
        cfg.uc = ty == QpType::Uc;
        // Spec: MR-2.6.1 — a larger MetaRoCE MTU than verbs can name, if the
        // transmit buffer holds it.
        let room = tx_len.saturating_sub(proto::connection::MAX_HEADER) as u32;
        cfg.mtu = p.mtu.max(p.rc_mtu.min(room));
        cfg.num_paths = p.num_paths;
        // Spec: MR-7.1.4 — verbs attributes carry no parameter block, so the
        // peer's path count is unknown: accept every path id a peer may use,
        // whatever its own `num_paths`.
        cfg.peer_num_paths = proto::MAX_PATHS as u8;
        cfg.max_rd_atomic = p.max_rd_atomic.clamp(1, proto::connection::MAX_RD_ATOMIC as u8);
        cfg.retry_cnt = p.retry_cnt;
        cfg.rnr_retry = p.rnr_retry;
        // Spec: MR-7.1.2 — the verbs code is IBTA's table (0 is 655.36 ms); the
        // wire's RNR Timer has its own encoding.
        cfg.min_rnr_timer = proto::rnr_timer_code_for_verbs(p.min_rnr_timer);
        cfg.src_port_base = src_port;
        let t = &p.tuning;
        let us = |v: u32| Duration::from_micros(u64::from(v));
        cfg.initial_rtt = us(t.initial_rtt_us);
        cfg.min_path_rto = us(t.min_path_rto_us);
        // Spec: MR-7.1.2 — verbs' Local ACK Timeout is the connection RTO's floor
        // when it is longer than the module's (rdma_cm gives ~0.5-1 s, perftest
        // 67 ms); the ceiling after backoff is never below the floor. 0 (IBTA:
        // no timer) leaves the module's floor.
        let local_ack = Duration::from_nanos(4096u64 << p.timeout.min(31));
        cfg.min_rto = us(t.min_rto_us).max(if p.timeout == 0 { Duration::from_nanos(0) } else { local_ack });
        cfg.max_rto = us(t.max_rto_us).max(cfg.min_rto);
        cfg.ack_delay = us(t.ack_delay_us);
        cfg.ack_every = t.ack_every;
        // Spec: MR-5.4.6 — a request/response conversation carries its ACKs in
        // the replies (one packet per message, as TCP's delayed ACK gives siw).
        cfg.reply_wait = us(t.reply_wait_us);
        cfg.cc.init_window = t.init_window;
        cfg.cc.max_window = t.max_window;
        cfg.cc.target_qdelay_ns = t.cc_target_delay_us.saturating_mul(1000);
        cfg.cc.ecn_gain_shift = t.ecn_gain_shift;
        cfg
    }

    /// RTR: the connection starts (RC) and packets for the QP are accepted.
    pub(crate) fn to_rtr(&mut self, p: &ConnectParams) {
        self.remote_gid = p.remote_gid;
        self.mtu = p.mtu;
        self.can_recv = true;
        let cfg = self.config_for(p);
        if let Some(conn) = self.conn.as_mut() {
            conn.reset(cfg);
            self.last_stats = proto::Stats::default();
            self.last_stats_sum = 0;
            self.connected = true;
            // A (re)started connection holds no work: whatever was handed to the one
            // it replaces and has not completed is handed over again.
            for r in [&mut self.q.sqr, &mut self.q.rqr] {
                r.fed = r.head;
            }
        }
    }

    /// RTS: sends are accepted. The send-side attributes (`sq_psn`, retry counts)
    /// arrive only now; the connection is restarted with them unless it already
    /// received packets (then restarting would lose them, so the RTR values stay).
    pub(crate) fn to_rts(&mut self, p: &ConnectParams) {
        self.can_send = true;
        let cfg = self.config_for(p);
        let restart = self.conn.as_ref().is_some_and(|c| {
            self.connected && *c.config() != cfg && c.stats().rx_packets == 0
        });
        if restart {
            self.to_rtr(p);
        }
    }

    /// The connection, while the QP is connected (RTR and after, until a reset).
    fn connection(&mut self) -> Option<&mut Connection> {
        self.conn.as_deref_mut().filter(|_| self.connected)
    }

    /// ERR: all outstanding work completes with a flush error.
    pub(crate) fn to_error(&mut self) {
        self.errored = true;
        self.can_send = false;
        if let Some(c) = self.connection() {
            c.set_error();
        }
    }

    /// Spec: MR-5.4.7 — the consumer takes the QP out of service (a move to ERR,
    /// or destroy): as [`Self::to_error`], and a connection that received data
    /// says its last word (its latest ACK, once) when it next runs. True if the
    /// QP is connected, i.e. a run now may have that to send.
    pub(crate) fn close(&mut self) -> bool {
        self.errored = true;
        self.can_send = false;
        self.connection().map(|c| c.close()).is_some()
    }

    /// Spec: MR-6.3.5 — asks the peer to move path `path` (its numbering) on that
    /// path's next ACK; false if the QP has no connection.
    pub(crate) fn ask_to_move(&mut self, path: usize) -> bool {
        self.connection().map(|c| c.ask_to_move(path)).is_some()
    }

    /// RESET: everything posted is forgotten (verbs: no completions).
    pub(crate) fn to_reset(&mut self) {
        self.q.sq.iter_mut().for_each(|s| *s = None);
        self.q.rq.iter_mut().for_each(|s| *s = None);
        self.q.sqr.clear();
        self.q.rqr.clear();
        self.connected = false;
        self.can_send = false;
        self.can_recv = false;
        self.errored = false;
        // Including what is still waiting in the process's rings.
        if let Some(u) = self.user.as_mut() {
            u.discard_posted();
        }
        self.publish_consumed();
    }

    /// A run is about to release the engine with copies still to do (spec
    /// MR-10.1.3); returns how many runs have copies under way now.
    pub(crate) fn copies_begin(&mut self) -> u32 {
        self.copies_out += 1;
        self.copies_out
    }

    /// A run's copies are done; true if no other run has any under way (then the
    /// caller runs the engine: delivery and completions waited for this).
    pub(crate) fn copies_end(&mut self) -> bool {
        self.retire_first = true;
        self.copies_out = self.copies_out.saturating_sub(1);
        self.copies_out == 0
    }

    /// Whether a run released the engine with copies still to make (spec
    /// MR-10.1.3): a reset waits until none is (MR-10.1.4).
    pub(crate) fn copies_under_way(&self) -> bool {
        self.copies_out > 0
    }

    /// Accounts one run of the data path that held the engine for `ns`.
    pub(crate) fn account_run(&mut self, ns: u64) {
        self.held_ns = self.held_ns.wrapping_add(ns);
        self.runs = self.runs.wrapping_add(1);
    }

    /// Reports the data path's state as named values (`rdma resource show qp -dd`),
    /// for diagnosing a stuck or slow QP.
    pub(crate) fn describe(&self, mut put: impl FnMut(&'static core::ffi::CStr, u64)) {
        let (s, r) = (&self.q.sqr, &self.q.rqr);
        put(c"sq_posted", u64::from(s.len()));
        put(c"sq_in_transport", u64::from(s.fed.wrapping_sub(s.head)));
        put(c"rq_posted", u64::from(r.len()));
        put(c"rq_in_transport", u64::from(r.fed.wrapping_sub(r.head)));
        put(c"errored", u64::from(self.errored));
        put(c"held_ns", self.held_ns);
        put(c"runs", self.runs);
        let Some(c) = self.conn.as_ref().filter(|_| self.connected) else { return };
        let st = c.stats();
        put(c"tx_packets", st.tx_packets);
        put(c"tx_retx", st.tx_retx);
        put(c"rx_packets", st.rx_packets);
        put(c"rx_dup", st.rx_dup);
        put(c"path_timeouts", st.path_timeouts);
        put(c"path_timeouts_overtaken", st.path_timeouts_overtaken);
        put(c"rto", st.rto);
        put(c"tlp", st.tlp);
        put(c"lost_detected", st.lost_detected);
        put(c"rnr_naks", st.rnr_naks);
        put(c"repaths", st.repaths);
        put(c"rx_invalid", st.rx_invalid);
        put(c"rx_beyond_window", st.rx_beyond_window);
        put(c"rx_acks_beyond_sent", st.rx_acks_beyond_sent);
        let (snd_una, snd_nxt, rcv_nxt, derived_pending) = c.tsn_state();
        put(c"snd_una", u64::from(snd_una));
        put(c"snd_nxt", u64::from(snd_nxt));
        put(c"rcv_nxt", u64::from(rcv_nxt));
        put(c"peer_tsn_derivable", u64::from(derived_pending));
        put(c"idle", u64::from(c.is_idle()));
        // 1 when the connection's in-flight bookkeeping is consistent (diagnostics).
        put(c"invariants_ok", u64::from(c.check_invariants().is_ok()));
        put(c"timer_armed", u64::from(c.poll_timeout().is_some()));
        put(c"reordering_multiplier", u64::from(c.reordering_multiplier()));
        // The connection's path count, timers and windows as it runs them (module
        // parameters, MR-5.4.1, MR-5.5, MR-8.6.1), named as those parameters: what
        // a tester on the wire must expect of it, read from the connection itself.
        let cfg = c.config();
        let us = |d: Duration| d.as_nanos() / 1000;
        put(c"num_paths", u64::from(cfg.num_paths));
        put(c"ack_every", u64::from(cfg.ack_every));
        put(c"ack_delay_us", us(cfg.ack_delay));
        put(c"reply_wait_us", us(cfg.reply_wait));
        put(c"initial_rtt_us", us(cfg.initial_rtt));
        put(c"min_path_rto_us", us(cfg.min_path_rto));
        put(c"min_rto_us", us(cfg.min_rto));
        put(c"max_rto_us", us(cfg.max_rto));
        put(c"init_window", u64::from(cfg.cc.init_window));
        put(c"max_window", u64::from(cfg.cc.max_window));
        put(c"cc_target_delay_us", u64::from(cfg.cc.target_qdelay_ns) / 1000);
        put(c"cc_ai_bytes", u64::from(cfg.cc.ai_bytes));
        put(c"cc_beta_q16", u64::from(cfg.cc.beta_q16));
        put(c"cc_max_mdf_q16", u64::from(cfg.cc.max_mdf_q16));
        put(c"ecn_gain_shift", u64::from(cfg.cc.ecn_gain_shift));
        // One row per path the protocol core can run (`num_paths` is at most this):
        // health, window, bytes in flight, RTT, and the UDP source port with the
        // times the path moved to a new one (MR-6.3.2), by which a tester on the
        // wire tells the paths' packets apart.
        #[rustfmt::skip]
        const NAMES: [[&core::ffi::CStr; 7]; crate::proto::connection::MAX_PATHS] = [
            [c"path0_status", c"path0_cwnd", c"path0_inflight", c"path0_srtt_ns", c"path0_rttvar_ns", c"path0_port", c"path0_gen"],
            [c"path1_status", c"path1_cwnd", c"path1_inflight", c"path1_srtt_ns", c"path1_rttvar_ns", c"path1_port", c"path1_gen"],
            [c"path2_status", c"path2_cwnd", c"path2_inflight", c"path2_srtt_ns", c"path2_rttvar_ns", c"path2_port", c"path2_gen"],
            [c"path3_status", c"path3_cwnd", c"path3_inflight", c"path3_srtt_ns", c"path3_rttvar_ns", c"path3_port", c"path3_gen"],
            [c"path4_status", c"path4_cwnd", c"path4_inflight", c"path4_srtt_ns", c"path4_rttvar_ns", c"path4_port", c"path4_gen"],
            [c"path5_status", c"path5_cwnd", c"path5_inflight", c"path5_srtt_ns", c"path5_rttvar_ns", c"path5_port", c"path5_gen"],
            [c"path6_status", c"path6_cwnd", c"path6_inflight", c"path6_srtt_ns", c"path6_rttvar_ns", c"path6_port", c"path6_gen"],
            [c"path7_status", c"path7_cwnd", c"path7_inflight", c"path7_srtt_ns", c"path7_rttvar_ns", c"path7_port", c"path7_gen"],
        ];
        for (i, n) in NAMES.iter().enumerate() {
            if let Some(p) = c.path_info(i) {
                put(n[0], p.status as u64);
                put(n[1], u64::from(p.cwnd));
                put(n[2], u64::from(p.inflight));
                put(n[3], u64::from(p.srtt_ns));
                put(n[4], u64::from(p.rttvar_ns));
                put(n[5], u64::from(p.src_port));
                put(n[6], u64::from(p.generation));
            }
        }
    }

    // -----------------------------------------------------------------------------
    // Posting

    /// `ib_post_send` for one work request. Errors as verbs expects: `EINVAL` for a
    /// bad request or a QP that cannot send, `ENOMEM` when the queue is full.
    pub(crate) fn post_send(&mut self, r: &SendRequest<'_>) -> Result {
        if !(self.can_send || self.errored) {
            return Err(EINVAL);
        }
        if r.sges.len() > self.q.max_send_sge || (r.local.is_some() && !self.ty.connected()) {
            return Err(EINVAL);
        }
        // Spec: MR-4.6.1 — a UC QP sends SEND and WRITE messages only.
        if self.ty == QpType::Uc && r.local.is_none() && !r.op.wire().allowed_on_uc() {
            return Err(EINVAL);
        }
        let inline_len = r.inline.map_or(0, |d| d.len());
        // An ATOMIC_WRITE's 8 bytes may come with the request whatever
        // `max_inline_data` is (`ibv_wr_atomic_write` passes them so).
        let inline_max = if r.op == WrOpcode::AtomicWrite { ATOMIC_WRITE_LEN } else { self.q.max_inline };
        if inline_len > inline_max {
            return Err(EINVAL);
        }
        let len = match (r.op, r.inline) {
            // A FLUSH moves no bytes: its length is the range's (spec MR-3.3.5).
            (WrOpcode::Flush, None) if r.sges.is_empty() => r.flush_len,
            (WrOpcode::Flush, _) => return Err(EINVAL),
            (_, Some(d)) => d.len() as u32,
            (_, None) => sge_len(r.sges)?,
        };
        let ud = match (self.ty, r.ud) {
            (QpType::Ud, Some(d)) if matches!(r.op, WrOpcode::Send | WrOpcode::SendImm) => Some(d),
            (t, None) if t.connected() => None,
            _ => return Err(EINVAL),
        };
        // A datagram is one packet; the IP layer fragments what the link cannot carry.
        if ud.is_some() && len > UD_MAX_PAYLOAD {
            return Err(EINVAL);
        }
        if self.q.sqr.len() >= self.q.sqr.depth {
            return Err(ENOMEM);
        }
        let i = self.q.sqr.tail;
        let slot = self.q.sqr.idx(i);
        let mut flags = proto::WR_SIGNALED;
        if r.solicited {
            flags |= proto::WR_SOLICITED;
        }
        if r.fence {
            flags |= proto::WR_FENCE;
        }
        let wr = SendWr {
            wr_id: slot as u64,
            opcode: r.op,
            len,
            remote_va: r.remote_va,
            rkey: r.rkey,
            imm: r.imm,
            compare: r.compare,
            swap_add: r.swap_add,
            flags,
        };
        let base = slot * self.q.max_send_sge;
        self.q.sq_sge[base..base + r.sges.len()].copy_from_slice(r.sges);
        if let Some(d) = r.inline {
            let ib = slot * self.q.inline_stride;
            self.q.sq_inline[ib..ib + d.len()].copy_from_slice(d);
        }
        self.q.sq[slot] = Some(SqSlot {
            wr_id: r.wr_id,
            signaled: r.signaled || self.sig_all,
            wr,
            nsge: r.sges.len() as u16,
            inline_len: r.inline.map(|d| d.len() as u16).unwrap_or(u16::MAX),
            extra: match (ud, r.local) {
                (Some(d), _) => SlotExtra::Ud(d),
                (None, Some(op)) => SlotExtra::Local(op),
                (None, None) => SlotExtra::None,
            },
            done: None,
        });
        self.q.sqr.tail = i.wrapping_add(1);
        Ok(())
    }

    /// `ib_post_recv` for one work request.
    pub(crate) fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result {
        if !(self.can_recv || self.errored) {
            return Err(EINVAL);
        }
        if sges.len() > self.q.max_recv_sge {
            return Err(EINVAL);
        }
        let len = sge_len(sges)?;
        if self.q.rqr.len() >= self.q.rqr.depth {
            return Err(ENOMEM);
        }
        let i = self.q.rqr.tail;
        let slot = self.q.rqr.idx(i);
        let base = slot * self.q.max_recv_sge;
        self.q.rq_sge[base..base + sges.len()].copy_from_slice(sges);
        self.q.rq[slot] = Some(RqSlot { wr_id, len, nsge: sges.len() as u16, done: None });
        self.q.rqr.tail = i.wrapping_add(1);
        // Straight to the connection: a message already waiting in the QP's receive
        // queue is handled before the work's next run feeds it, and would meet an
        // RNR NAK (a min_rnr_timer wait, 655 ms under rdma_cm) for nothing.
        if let Some(conn) = self.conn.as_mut().filter(|_| self.connected && !self.errored) {
            feed_receives(&mut self.q, conn);
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------
    // Running

    /// Handles one received MetaRoCE datagram (bytes after the UDP header). True
    /// if it was refused because memory it needs is not resident (spec MR-9.2.5):
    /// the caller may keep it and hand it in again once the fault is served,
    /// sparing the peer a retransmission.
    ///
    /// `later`: where copies of payload into pinned memory may be left for after the
    /// engine is released (spec MR-10.1.3); `None` copies everything now.
    pub(crate) fn on_datagram(
        &mut self,
        sh: &Shared<'_>,
        io: &mut impl Io,
        now: Instant,
        d: &Received<'_>,
        later: Option<&mut LaterCopies>,
    ) -> bool {
        let (src_port, ce, bytes) = (d.src_port, d.ce, d.bytes);
        self.retire_first = true;
        match self.ty {
            QpType::Rc | QpType::Uc => {
                let Engine { conn, q, accessor, access, counters, errored, fault, copies_out, connected, .. } = self;
                let Some(conn) = conn.as_mut().filter(|_| *connected) else {
                    // Spec: MR-3.1.5 — routed here on its headers alone; what
                    // does not parse is counted as malformed wherever it ends.
                    if proto::wire::PacketRepr::parse_scattered(bytes, d.more).is_err() {
                        counters.rx_malformed += 1;
                    }
                    return false;
                };
                // Every posted receive is the connection's before a message needs it.
                if !*errored {
                    feed_receives(q, conn);
                }
                let unplaced = *copies_out > 0;
                let mut mem = QpMemory { sh, q, by: *accessor, access: *access, counters, pages: None, fault, later, unplaced };
                let refused = conn.stats().rx_faults;
                conn.handle_scattered(now, src_port, ce, bytes, d.more, &mut mem);
                conn.stats().rx_faults != refused
            }
            QpType::Ud => self.on_ud(sh, io, d.addrs, bytes),
        }
    }

    /// See [`Self::on_datagram`].
    fn on_ud(&mut self, sh: &Shared<'_>, io: &mut impl Io, addrs: Option<IpPair>, bytes: &[u8]) -> bool {
        // On an SRQ: a WQE for a valid datagram, taken only now (as for RC).
        if let Some(srq) = sh.srq.filter(|_| self.on_srq && self.can_recv && !self.errored) {
            if self.q.rqr.len() == 0 && ud::accept_datagram(bytes, self.qpn, self.qkey, Some(u32::MAX)).is_ok() {
                take_from_srq(&mut self.q, srq);
                self.q.rqr.fed = self.q.rqr.tail;
            }
        }
        let r = &self.q.rqr;
        let next = (r.len() > 0 && self.can_recv && !self.errored).then(|| self.q.rq[r.idx(r.head)]).flatten();
        // The receive buffer holds the GRH first; the payload must fit after it.
        let room = next.map(|s| s.len.saturating_sub(GRH_LEN as u32));
        let d = match ud::accept_datagram(bytes, self.qpn, self.qkey, room) {
            Ok(d) => d,
            // Spec: MR-3.1.5 — routed here on its headers alone.
            Err(ud::UdDrop::Wire(_)) => {
                self.counters.rx_malformed += 1;
                return false;
            }
            Err(_) => {
                self.counters.rx_ud_dropped += 1;
                return false;
            }
        };
        let Some(slot) = next else { return false };
        // (The driver gives every UD datagram its addresses.)
        let Some(addrs) = addrs else {
            self.counters.rx_ud_dropped += 1;
            return false;
        };
        let idx = self.q.rqr.idx(self.q.rqr.head);
        let (grh, grh_kind) = match addrs {
            IpPair::V4(s, dst) => (grh_ipv4(s, dst, d.payload.len()), Grh::Ipv4),
            IpPair::V6(s, dst) => (grh_ipv6(&s, &dst, d.payload.len()), Grh::Ipv6),
        };
        let fault = &mut self.fault;
        let mut mem = QpMemory {
            sh,
            q: &mut self.q,
            by: self.accessor,
            access: self.access,
            counters: &mut self.counters,
            pages: None,
            fault,
            later: None,
            unplaced: false,
        };
        let r = mem.write_recv(idx as u64, 0, &grh).and_then(|()| mem.write_recv(idx as u64, GRH_LEN as u32, d.payload));
        // Spec: MR-9.2.5 — a receive buffer not resident: the datagram is
        // refused, the WQE stays for it, the fault work brings the buffer in (and
        // the caller hands the datagram in again, or it is lost: UD is unreliable).
        if r == Err(MemError::Fault) {
            return true;
        }
        let status = if r.is_ok() { WcStatus::Success } else { WcStatus::LocProtErr };
        self.q.rqr.head = self.q.rqr.head.wrapping_add(1);
        self.q.rqr.fed = self.q.rqr.head;
        self.q.rq[idx] = None;
        let wc = Wc {
            qpn: self.qpn,
            qp_handle: 0,
            wr_id: slot.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: (GRH_LEN + d.payload.len()) as u32,
            src_qp: d.src_qpn,
            imm: d.imm,
            invalidated_rkey: None,
            grh: grh_kind,
        };
        io.complete(true, wc, d.solicited);
        false
    }

    /// One run of the work: timers, feeding posted work to the connection,
    /// transmitting, completing. Returns when the work must run again: `Some(now)`
    /// for "at once", a later instant for a timer, `None` for "when something
    /// happens".
    ///
    /// `staging`: the buffer packets are built in (the running CPU's); at least
    /// [`staging_len`] of the QP's `max_rc_mtu` bytes.
    ///
    /// `rx_drained`: every received datagram has been handed in. Timers run only
    /// then: an acknowledgement still waiting in the receive queue must not let a
    /// retransmission timer fire as if it had been lost.
    ///
    /// `ack_clocked` (spec MR-10.3.3): while packets are in flight, hand posted work to the
    /// connection but leave transmitting it to the run that their acknowledgement
    /// triggers. A doorbell asks for this: it runs on whatever CPU the process is
    /// on, the acknowledgements' runs on the CPU whose receive queue the flow
    /// uses, and packets transmitted from two CPUs reach the peer through two
    /// per-CPU queues, out of order within a path (each reordering deeper than
    /// the reorder threshold costs a spurious retransmission, MR-5.3.2).
    pub(crate) fn run(
        &mut self,
        sh: &Shared<'_>,
        io: &mut impl Io,
        staging: &mut [u8],
        now: Instant,
        rx_drained: bool,
        ack_clocked: bool,
    ) -> Option<Instant> {
        // The QP's connections are configured for this many bytes (`config_for`).
        let n = self.tx_len.min(staging.len());
        let tx = &mut staging[..n];
        match self.ty {
            QpType::Rc | QpType::Uc => self.run_rc(sh, io, tx, now, rx_drained, ack_clocked),
            QpType::Ud => {
                self.run_ud(sh, io, tx, now);
                None
            }
        }
    }

    fn run_rc(
        &mut self,
        sh: &Shared<'_>,
        io: &mut impl Io,
        tx: &mut [u8],
        now: Instant,
        rx_drained: bool,
        ack_clocked: bool,
    ) -> Option<Instant> {
        if !self.connected {
            self.flush_unfed(io);
            return None;
        }
        // Completions the datagrams just handed in produced go out before this run
        // transmits: the process polling for them (the other half of a ping-pong)
        // goes on while the ACK and the next packets are built and sent. Only those
        // (and those that waited for copies) can be new here: the last run ended by
        // retiring what it could, so a doorbell's run does not look twice.
        if core::mem::take(&mut self.retire_first) {
            self.retire_ready(io);
        }
        let mut local_failed = false;
        let Engine { conn, q, accessor, access, counters, remote_gid, tx_large, tx_by_ref, fault, copies_out, next_deadline, .. } = self;
        let conn = conn.as_mut()?;
        let unplaced = *copies_out > 0;
        // The connection is asked only when the deadline the last run ended with
        // has come: its deadlines change only in runs, and one that the datagrams
        // just handed in brought forward is found by this run's closing look,
        // which then runs the engine again at once.
        if rx_drained && next_deadline.is_some_and(|t| t <= now) && conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        // Spec: MR-9.2.5 — delivery that stopped at memory not resident goes on
        // (the fault work ran the QP once it brought the memory in).
        if fault.is_none() {
            let (q, counters, fault) = (&mut *q, &mut *counters, &mut *fault);
            let mut mem = QpMemory { sh, q, by: *accessor, access: *access, counters, pages: None, fault, later: None, unplaced };
            conn.resume_delivery(now, &mut mem);
        }
        // Hand posted work to the connection while it has room; memory operations
        // execute here, when their turn in the send queue comes.
        while q.sqr.fed != q.sqr.tail {
            let i = q.sqr.idx(q.sqr.fed);
            let Some(s) = q.sq[i] else { break };
            if let SlotExtra::Local(op) = s.extra {
                // A memory operation with IB_SEND_FENCE waits until every earlier
                // send has completed (a LOCAL_INV after the READ that used the key;
                // the ACK that completes the last one runs the QP again).
                if s.wr.flags & proto::WR_FENCE != 0 && conn.sends_outstanding() {
                    break;
                }
                let (r, opcode, failed) = match op {
                    LocalOp::RegMr { key, access } => {
                        (sh.mrs.fast_register(sh.keys, key, accessor.pd, access), WcOpcode::RegMr, WcStatus::LocProtErr)
                    }
                    LocalOp::LocalInv { key } => (sh.mrs.invalidate(sh.keys, key, *accessor), WcOpcode::LocalInv, WcStatus::LocProtErr),
                    LocalOp::BindMw(b) => (sh.mrs.bind(sh.keys, &b, *accessor), WcOpcode::BindMw, WcStatus::MwBindErr),
                };
                if r.is_err() {
                    counters.access_errors += 1;
                    local_failed = true;
                }
                if let Some(slot) = q.sq[i].as_mut() {
                    let status = if r.is_ok() { WcStatus::Success } else { failed };
                    slot.done = Some(Completion::new(i as u64, status, opcode, 0));
                }
                q.sqr.fed = q.sqr.fed.wrapping_add(1);
                if local_failed {
                    break;
                }
                continue;
            }
            match conn.post_send(s.wr) {
                Ok(()) => q.sqr.fed = q.sqr.fed.wrapping_add(1),
                Err(PostError::QueueFull) => break,
                Err(_) => {
                    // Refused (e.g. a misaligned atomic): complete it with an error.
                    let i = q.sqr.idx(q.sqr.fed);
                    if let Some(slot) = q.sq[i].as_mut() {
                        slot.done = Some(Completion::new(i as u64, WcStatus::LocQpOpErr, WcOpcode::of(s.wr.opcode), 0));
                    }
                    q.sqr.fed = q.sqr.fed.wrapping_add(1);
                }
            }
        }
        feed_receives(q, conn);
        let mut more = false;
        if !(ack_clocked && conn.in_flight()) {
            let by_ref = io.sends_pages();
            // The pages' holder is made once a run, switched on for the packets
            // built to take pages, and given its fragment list only when one does:
            // the list is large enough that making it, or moving it in and out of
            // `mem`, for each packet cost more than building an ACK.
            let pages = by_ref.then(|| TakePages { frags: None, base: tx.as_ptr() as usize, on: false });
            let mut mem = QpMemory { sh, q, by: *accessor, access: *access, counters, pages, fault, later: None, unplaced };
            let mut sent = 0;
            let want = conn.max_packet_len();
            // Packets with payload from user memory leave with the pages attached
            // (zero-copy, when `by_ref`): built in the staging buffer, which takes
            // their headers only, then sent as headers + page fragments. Other
            // packets with payload are built in the skb they leave in (one copy);
            // small ones (ACKs, short messages) in the staging buffer and copied into
            // an skb of their own size, so that each does not cost an allocation of
            // the largest packet (an order-4 page block at rc_mtu=32768) that is then
            // mostly empty. Which kind comes next is guessed from the last one; a
            // wrong guess costs one copy or one oversized skb, never a packet.
            loop {
                let direct = if *tx_large && !(by_ref && *tx_by_ref) { io.tx_buf(want) } else { None };
                let ok = match direct {
                    Some(mut buf) => match conn.poll_transmit(now, &mut buf, &mut mem) {
                        Some(t) => (io.transmit_as(remote_gid, &t, buf), t.len),
                        None => break,
                    },
                    // A small packet expected, or no memory for a large skb: the packet
                    // is still built (the connection must not wait for memory with
                    // timers stopped), and if no skb can hold it either it is counted
                    // lost; loss recovery sends it again.
                    None => {
                        mem.take_pages(true);
                        let t = conn.poll_transmit(now, tx, &mut mem);
                        mem.take_pages(false);
                        let taken = mem.pages.as_mut().and_then(|p| p.frags.as_mut()).filter(|f| f.bytes() > 0);
                        let Some(t) = t else {
                            if let Some(f) = taken {
                                f.clear();
                            }
                            break;
                        };
                        *tx_by_ref = taken.is_some();
                        let ok = match taken {
                            Some(pages) => {
                                let (sent, by_ref) = send_by_ref(io, remote_gid, &t, tx, pages);
                                mem.counters.tx_zero_copy += u64::from(by_ref);
                                sent
                            }
                            None => {
                                let pkt = tx.get(..t.len).unwrap_or(&[]);
                                !pkt.is_empty() && io.tx_copy(pkt).is_some_and(|buf| io.transmit_as(remote_gid, &t, buf))
                            }
                        };
                        (ok, t.len)
                    }
                };
                *tx_large = ok.1 > SMALL_TX;
                match ok {
                    (true, len) => {
                        mem.counters.tx_packets += 1;
                        mem.counters.tx_bytes += len as u64;
                    }
                    (false, _) => mem.counters.tx_failed += 1,
                }
                sent += 1;
                if sent == TX_BUDGET {
                    more = true;
                    break;
                }
            }
        }
        let dead = conn.state() == proto::QpState::Error;
        let next = conn.poll_timeout();
        *next_deadline = next;
        self.retire_ready(io);
        // A failed memory operation is a local protection error: the QP goes to
        // the error state and later work is flushed.
        if local_failed && !self.errored {
            self.to_error();
        }
        if dead && !self.errored {
            self.errored = true;
            self.can_send = false;
        }
        if self.errored {
            self.flush_unfed(io);
        }
        if more { Some(now) } else { next }
    }

    /// Notes a connection completion in its slot (completions leave in queue order).
    fn record(q: &mut Queues, c: Completion) {
        let recv = c.opcode.is_recv();
        let (depth, slots) = if recv { (q.rqr.depth, None) } else { (q.sqr.depth, Some(&mut q.sq)) };
        let i = c.wr_id as usize;
        if i >= depth as usize {
            return;
        }
        match slots {
            Some(sq) => {
                if let Some(s) = sq[i].as_mut() {
                    s.done = Some(c);
                }
            }
            None => {
                if let Some(s) = q.rq[i].as_mut() {
                    s.done = Some(c);
                }
            }
        }
    }

    /// Takes the connection's completions and delivers what is finished, unless
    /// copies are under way (spec MR-10.1.3: a completion, a READ's in particular,
    /// promises bytes in memory).
    fn retire_ready(&mut self, io: &mut impl Io) {
        if let Some(conn) = self.conn.as_mut() {
            while let Some(c) = conn.poll_completion() {
                Self::record(&mut self.q, c);
            }
        }
        if self.copies_out == 0 {
            self.retire(io);
        }
    }

    /// Delivers finished work in posting order.
    ///
    /// A process that polls a completion may post again at once, into the slot
    /// the completed request held: the slot is published free before the
    /// completion is.
    fn retire(&mut self, io: &mut impl Io) {
        let (qpn, errored) = (self.qpn, self.errored);
        let (q, user) = (&mut self.q, self.user.as_ref());
        while q.sqr.head != q.sqr.fed {
            let i = q.sqr.idx(q.sqr.head);
            let Some(s) = q.sq[i] else { break };
            let Some(c) = s.done else { break };
            q.sq[i] = None;
            q.sqr.head = q.sqr.head.wrapping_add(1);
            if s.signaled || c.status != WcStatus::Success {
                if let Some(u) = user {
                    u.publish_held(q.sqr.len(), q.rqr.len(), errored);
                }
                io.complete(false, wc_of(qpn, s.wr_id, &c), false);
            }
        }
        while q.rqr.head != q.rqr.fed {
            let i = q.rqr.idx(q.rqr.head);
            let Some(s) = q.rq[i] else { break };
            let Some(c) = s.done else { break };
            q.rq[i] = None;
            q.rqr.head = q.rqr.head.wrapping_add(1);
            if let Some(u) = user {
                u.publish_held(q.sqr.len(), q.rqr.len(), errored);
            }
            io.complete(true, wc_of(qpn, s.wr_id, &c), c.solicited);
        }
    }

    fn wc(&self, wr_id: u64, c: &Completion) -> Wc {
        wc_of(self.qpn, wr_id, c)
    }
}

/// Takes the oldest WQE of `srq` into the receive ring's next slot (none if the ring
/// is full or the SRQ empty). Returns the slot and the WQE's byte length.
fn take_from_srq(q: &mut Queues, srq: &Srq) -> Option<(usize, u32)> {
    if q.rqr.len() >= q.rqr.depth {
        return None;
    }
    let slot = q.rqr.idx(q.rqr.tail);
    let base = slot * q.max_recv_sge;
    let t = srq.take(&mut q.rq_sge[base..base + q.max_recv_sge])?;
    let len = sge_len(&q.rq_sge[base..base + t.nsge]).unwrap_or(0);
    q.rq[slot] = Some(RqSlot { wr_id: t.wr_id, len, nsge: t.nsge as u16, done: None });
    q.rqr.tail = q.rqr.tail.wrapping_add(1);
    Some((slot, len))
}

/// Hands posted receives to the connection while it has room.
fn feed_receives(q: &mut Queues, conn: &mut Connection) {
    while q.rqr.fed != q.rqr.tail {
        let Some(s) = q.rq[q.rqr.idx(q.rqr.fed)] else { break };
        let wr = RecvWr { wr_id: q.rqr.idx(q.rqr.fed) as u64, len: s.len };
        match conn.post_recv(wr) {
            Ok(()) => q.rqr.fed = q.rqr.fed.wrapping_add(1),
            Err(_) => break,
        }
    }
}

/// A verbs completion of QP `qpn` from a connection completion.
fn wc_of(qpn: u32, wr_id: u64, c: &Completion) -> Wc {
    Wc {
        qpn,
        qp_handle: 0,
        wr_id,
        status: c.status,
        opcode: c.opcode,
        byte_len: c.byte_len,
        src_qp: 0,
        imm: c.imm,
        invalidated_rkey: c.invalidated_rkey,
        grh: Grh::None,
    }
}

impl Engine {
    /// In the error state, work the connection never saw completes with a flush
    /// error (after everything it did see, which it flushed itself).
    fn flush_unfed(&mut self, io: &mut impl Io) {
        if !self.errored {
            return;
        }
        let flush = |wr_id: u64, opcode: WcOpcode, qpn: u32| wc_of(qpn, wr_id, &Completion::new(wr_id, WcStatus::WrFlushErr, opcode, 0));
        // Only once the connection's own completions are out (`head == fed`).
        // Slots are published free before their completions (see `retire`).
        let (q, user) = (&mut self.q, self.user.as_ref());
        if q.sqr.head == q.sqr.fed {
            while q.sqr.head != q.sqr.tail {
                let i = q.sqr.idx(q.sqr.head);
                q.sqr.head = q.sqr.head.wrapping_add(1);
                if let Some(s) = q.sq[i].take() {
                    if let Some(u) = user {
                        u.publish_held(q.sqr.len(), q.rqr.len(), true);
                    }
                    io.complete(false, flush(s.wr_id, WcOpcode::of(s.wr.opcode), self.qpn), false);
                }
            }
            q.sqr.fed = q.sqr.head;
        }
        if q.rqr.head == q.rqr.fed {
            while q.rqr.head != q.rqr.tail {
                let i = q.rqr.idx(q.rqr.head);
                q.rqr.head = q.rqr.head.wrapping_add(1);
                if let Some(s) = q.rq[i].take() {
                    if let Some(u) = user {
                        u.publish_held(q.sqr.len(), q.rqr.len(), true);
                    }
                    io.complete(true, flush(s.wr_id, WcOpcode::Recv, self.qpn), false);
                }
            }
            q.rqr.fed = q.rqr.head;
        }
    }

    fn run_ud(&mut self, sh: &Shared<'_>, io: &mut impl Io, tx: &mut [u8], now: Instant) {
        if self.errored {
            self.flush_unfed(io);
            return;
        }
        if !self.can_send {
            return;
        }
        while self.q.sqr.head != self.q.sqr.tail {
            let i = self.q.sqr.idx(self.q.sqr.head);
            let Some(s) = self.q.sq[i] else { break };
            let SlotExtra::Ud(dest) = s.extra else { break };
            let len = s.wr.len as usize;
            let hdr = ud_header_room();
            let status = {
                let Engine { q, accessor, access, counters, qpn, qkey, src_port, fault, .. } = self;
                let mut mem =
                    QpMemory { sh, q, by: *accessor, access: *access, counters, pages: None, fault, later: None, unplaced: false };
                // Gather the payload behind the room the header needs, then build the
                // datagram around it.
                let read = match tx.get_mut(hdr..).and_then(|body| body.get_mut(..len)) {
                    Some(b) => mem.read_local(i as u64, 0, b),
                    None => Err(MemError::Access),
                };
                if read == Err(MemError::Fault) {
                    // Spec: MR-9.2.5 — the send waits at the head of the queue
                    // until the fault work has brought its buffer in.
                    return;
                }
                if read.is_err() {
                    WcStatus::LocProtErr
                } else {
                    let send = ud::UdSend {
                        dest_qpn: dest.qpn,
                        qkey: dest.qkey,
                        qp_qkey: *qkey,
                        src_qpn: *qpn,
                        imm: (s.wr.opcode == WrOpcode::SendImm).then_some(s.wr.imm),
                        solicited: s.wr.flags & proto::WR_SOLICITED != 0,
                        payload: &[],
                    };
                    emit_ud(tx, hdr, len, now, &send, dest, *src_port, io, counters)
                }
            };
            self.q.sq[i] = None;
            self.q.sqr.head = self.q.sqr.head.wrapping_add(1);
            self.q.sqr.fed = self.q.sqr.head;
            if s.signaled || status != WcStatus::Success {
                let c = Completion {
                    wr_id: 0,
                    status,
                    opcode: WcOpcode::Send,
                    byte_len: len as u32,
                    imm: None,
                    invalidated_rkey: None,
                    solicited: false,
                };
                io.complete(false, self.wc(s.wr_id, &c), false);
            }
        }
    }
}

/// The GRH area of a UD receive for an IPv4 datagram: as in RoCE v2, the last 20
/// bytes hold an IPv4 header (with a valid checksum: ib_core verifies it before it
/// trusts the addresses, e.g. to answer a MAD via `ib_init_ah_attr_from_wc`).
fn grh_ipv4(saddr: [u8; 4], daddr: [u8; 4], payload_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let h = &mut g[20..];
    let total = (20 + 8 + payload_len).min(0xffff) as u16;
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[6] = 0x40; // don't fragment
    h[8] = 64; // TTL
    h[9] = 17; // UDP
    h[12..16].copy_from_slice(&saddr);
    h[16..20].copy_from_slice(&daddr);
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    g
}

/// The GRH area of a UD receive for an IPv6 datagram: the IPv6 header itself.
fn grh_ipv6(saddr: &[u8; 16], daddr: &[u8; 16], payload_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    g[0] = 0x60;
    let plen = (8 + payload_len).min(0xffff) as u16;
    g[4..6].copy_from_slice(&plen.to_be_bytes());
    g[6] = 17; // UDP
    g[7] = 64; // hop limit
    g[8..24].copy_from_slice(saddr);
    g[24..40].copy_from_slice(daddr);
    g
}

/// Header bytes of a UD packet in front of its payload.
fn ud_header_room() -> usize {
    proto::wire::BaseRepr::LEN + proto::wire::UdRepr::LEN
}

/// Builds a UD datagram whose payload already sits at `tx[hdr..hdr + len]` and sends
/// it. The header is emitted into a separate small buffer first so the payload does
/// not have to be copied twice.
#[allow(clippy::too_many_arguments)]
fn emit_ud(
    tx: &mut [u8],
    hdr: usize,
    len: usize,
    now: Instant,
    send: &ud::UdSend<'_>,
    dest: UdDest,
    src_port: u16,
    io: &mut impl Io,
    counters: &mut EngineCounters,
) -> WcStatus {
    let mut head = [0u8; 64];
    let Some(head) = head.get_mut(..hdr) else { return WcStatus::LocQpOpErr };
    // An empty payload yields exactly the header.
    match ud::emit_datagram(head, now, send) {
        Ok(n) if n == hdr => {}
        _ => return WcStatus::LocQpOpErr,
    }
    let Some(room) = tx.get_mut(..hdr) else { return WcStatus::LocQpOpErr };
    room.copy_from_slice(head);
    let Some(pkt) = tx.get(..hdr + len) else { return WcStatus::LocQpOpErr };
    // UD has one path: the QP's first source port.
    if io.transmit(&dest.dgid, src_port, Ecn::Ect0, pkt) {
        counters.tx_packets += 1;
        counters.tx_bytes += pkt.len() as u64;
    } else {
        counters.tx_failed += 1;
    }
    WcStatus::Success
}

/// Sends packet `t`, built in `tx` with its payload held by reference in
/// `pages`: headers copied, pages attached. If the payload is not where the
/// headers end, or the pages cannot go out as they are, it is copied into `tx`
/// and the packet sent from there. Returns (sent, sent by reference).
fn send_by_ref(io: &mut impl Io, dgid: &[u8; 16], t: &proto::Transmit, tx: &mut [u8], pages: &mut TxFrags) -> (bool, bool) {
    let held = pages.bytes();
    let Some(place) = pages.place() else {
        pages.clear();
        return (false, false);
    };
    if place + held == t.len {
        if let Some(header) = tx.get(..place) {
            if io.transmit_pages(dgid, t.src_port, t.ecn, header, pages) {
                return (true, true);
            }
        }
    }
    // Not sent by reference: the bytes go where the protocol meant them.
    let copied = match tx.get_mut(place..place + held) {
        Some(out) => pages.copy_to(out),
        None => false,
    };
    pages.clear();
    (copied && io.transmit(dgid, t.src_port, t.ecn, tx.get(..t.len).unwrap_or(&[])), false)
}

/// Where the payload of the packet being built goes by reference: `frags` takes
/// its pages; `base` is the address of the packet buffer, to note where in it the
/// payload would have been written.
struct TakePages {
    /// Made when a packet first takes pages (see `Engine::run`).
    frags: Option<TxFrags>,
    base: usize,
    /// The packet being built takes pages (otherwise its payload is copied).
    on: bool,
}

/// The connection's view of the QP's memory: posted buffers by slot, registered
/// regions by key, with the QP's protection domain and access rights.
struct QpMemory<'a, 'b> {
    sh: &'a Shared<'b>,
    q: &'a mut Queues,
    by: Accessor,
    access: u32,
    counters: &'a mut EngineCounters,
    /// While a packet is built for sending by reference: where its payload's
    /// pages go (payloads from user memory of at least [`PAGES_MIN`] bytes).
    pages: Option<TakePages>,
    /// The first memory found not resident (spec MR-9.2.5), for the QP's fault
    /// work (the engine's [`Engine::fault`]).
    fault: &'a mut Option<FaultAt>,
    /// While a received datagram is handed in: where copies into pinned memory are
    /// left for after the engine is released (spec MR-10.1.3).
    later: Option<&'a mut LaterCopies>,
    /// Other runs' copies are under way ([`Engine::copies_out`]).
    unplaced: bool,
}

impl TakePages {
    /// After an attempt to take the pages for `out`: true if all were taken (the
    /// payload's place in the packet buffer noted); otherwise drops whatever was
    /// taken, and the caller copies into `out` instead (which also reports an
    /// access error, if that is why).
    fn taken(&mut self, r: Result<(), MemError>, out: &[u8]) -> bool {
        let place = (out.as_ptr() as usize).checked_sub(self.base);
        let frags = self.frags();
        match (r, place) {
            (Ok(()), Some(at)) if frags.bytes() == out.len() => {
                frags.note_place(at);
                true
            }
            _ => {
                frags.clear();
                false
            }
        }
    }

    /// The fragment list, made on first use.
    fn frags(&mut self) -> &mut TxFrags {
        self.frags.get_or_insert_with(TxFrags::new)
    }
}

impl QpMemory<'_, '_> {
    /// Whether the packet about to be built takes its payload's pages (when this
    /// memory has a holder for them).
    fn take_pages(&mut self, on: bool) {
        if let Some(p) = self.pages.as_mut() {
            p.on = on;
        }
    }

    /// Walks `n` SGEs (`sge_at(ctx, j)` is the `j`th), calling
    /// `f(ctx, sge, offset_in_sge, range_in_data)` for each piece of
    /// `[offset, offset + len)`; an access error if they hold fewer bytes.
    fn walk<C>(
        ctx: &mut C,
        sge_at: impl Fn(&C, usize) -> Option<Sge>,
        n: usize,
        offset: u32,
        len: usize,
        mut f: impl FnMut(&mut C, &Sge, u64, core::ops::Range<usize>) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let mut skip = offset as u64;
        let mut done = 0usize;
        for j in 0..n {
            if done == len {
                break;
            }
            let Some(s) = sge_at(ctx, j) else { break };
            let sl = u64::from(s.length);
            if skip >= sl {
                skip -= sl;
                continue;
            }
            let k = core::cmp::min(sl - skip, (len - done) as u64) as usize;
            f(ctx, &s, skip, done..done + k)?;
            done += k;
            skip = 0;
        }
        if done == len { Ok(()) } else { Err(MemError::Access) }
    }

    /// [`Self::walk`] over the `n` SGEs at `base` of the send (`send`) or receive
    /// queue's SGE table, with this memory as the context (`f` may place).
    fn walk_slot(
        &mut self,
        send: bool,
        base: usize,
        n: usize,
        offset: u32,
        len: usize,
        f: impl FnMut(&mut Self, &Sge, u64, core::ops::Range<usize>) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let sge_at = |this: &Self, j: usize| {
            let table = if send { &this.q.sq_sge } else { &this.q.rq_sge };
            table.get(base + j).copied()
        };
        Self::walk(self, sge_at, n, offset, len, f)
    }

    /// Copies `data` into the memory `key` names at `va`, after the checks of an
    /// access `need`s; a copy into pinned user memory that [`LaterCopies`] takes is
    /// left for after the engine is released (spec MR-10.1.3), the checks made now.
    fn place(&mut self, key: u32, va: u64, need: Need, data: &[u8]) -> Result<(), MemError> {
        let (sh, by, fault) = (self.sh, self.by, &mut *self.fault);
        let leave = self.later.as_deref().is_some_and(|l| l.takes(data));
        let mut left = false;
        let r = sh.mrs.access(sh.keys, key, by, va, data.len(), need, fault, |m, iova, o| {
            if leave && m.pinned() {
                left = true;
                Ok(())
            } else {
                m.write(iova, o, data)
            }
        });
        if left && r.is_ok() && !self.later.as_deref_mut().is_some_and(|l| l.push(key, va, need, by, data)) {
            // `takes` said yes; should the list refuse after all, copy now.
            return sh.mrs.access(sh.keys, key, by, va, data.len(), need, &mut *self.fault, |m, iova, o| m.write(iova, o, data));
        }
        r
    }

    /// Counts a failed access: a fault (memory not resident, spec MR-9.2.5) or an
    /// access error.
    fn count<T>(&mut self, r: Result<T, MemError>) -> Result<T, MemError> {
        match r {
            Ok(_) => {}
            Err(MemError::Fault) => self.counters.odp_faults += 1,
            Err(_) => self.counters.access_errors += 1,
        }
        r
    }
}

impl LocalMemory for QpMemory<'_, '_> {
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError> {
        let i = wr_id as usize;
        let Some(s) = self.q.sq.get(i).copied().flatten() else { return Err(MemError::Access) };
        if s.inline_len != u16::MAX {
            let base = i * self.q.inline_stride;
            let start = base + offset as usize;
            let end = start + out.len();
            if end > base + s.inline_len as usize {
                return Err(MemError::Access);
            }
            out.copy_from_slice(&self.q.sq_inline[start..end]);
            return Ok(());
        }
        let (base, n) = (i * self.q.max_send_sge, s.nsge as usize);
        let (sh, by) = (self.sh, self.by);
        if self.pages.as_ref().is_some_and(|p| p.on && out.len() >= PAGES_MIN) {
            let r = self.walk_slot(true, base, n, offset, out.len(), |this, sge, off, range| {
                let Some(p) = this.pages.as_mut() else { return Err(MemError::Access) };
                sh.mrs.access(sh.keys, sge.lkey, by, sge.addr + off, range.len(), Need::LocalRead, this.fault, |m, iova, o| {
                    m.take_pages(iova, o, range.len(), p.frags())
                })
            });
            if self.pages.as_mut().is_some_and(|p| p.taken(r, out)) {
                return Ok(());
            }
        }
        let r = self.walk_slot(true, base, n, offset, out.len(), |this, sge, off, range| {
            let buf = &mut out[range];
            sh.mrs.access(sh.keys, sge.lkey, by, sge.addr + off, buf.len(), Need::LocalRead, this.fault, |m, iova, o| m.read(iova, o, buf))
        });
        self.count(r)
    }

    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        let i = wr_id as usize;
        let Some(s) = self.q.sq.get(i).copied().flatten() else { return Err(MemError::Access) };
        let base = i * self.q.max_send_sge;
        let r = self.walk_slot(true, base, s.nsge as usize, offset, data.len(), |this, sge, off, range| {
            this.place(sge.lkey, sge.addr + off, Need::LocalWrite, &data[range])
        });
        self.count(r)
    }
}

impl Responder for QpMemory<'_, '_> {
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        if self.access & crate::mr::ACCESS_REMOTE_WRITE == 0 {
            return self.count(Err(MemError::Access));
        }
        let r = self.place(rkey, va, Need::RemoteWrite, data);
        self.count(r)
    }

    fn placed(&mut self) -> bool {
        !self.unplaced && self.later.as_ref().is_none_or(|l| l.is_empty())
    }

    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        if self.access & crate::mr::ACCESS_REMOTE_READ == 0 {
            return self.count(Err(MemError::Access));
        }
        let (sh, by, fault) = (self.sh, self.by, &mut *self.fault);
        if let Some(p) = self.pages.as_mut().filter(|p| p.on && out.len() >= PAGES_MIN) {
            let r = sh.mrs.access(sh.keys, rkey, by, va, out.len(), Need::RemoteRead, fault, |m, iova, o| {
                m.take_pages(iova, o, out.len(), p.frags())
            });
            if p.taken(r, out) {
                return Ok(());
            }
        }
        let r = sh.mrs.access(sh.keys, rkey, by, va, out.len(), Need::RemoteRead, fault, |m, iova, o| m.read(iova, o, out));
        self.count(r)
    }

    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if self.access & crate::mr::ACCESS_REMOTE_ATOMIC == 0 {
            return self.count(Err(MemError::Access));
        }
        if va & 7 != 0 {
            return Err(MemError::Operation);
        }
        let mut orig = 0u64;
        // The table is held alone across read-modify-write, so atomics on one
        // device are atomic with respect to each other and to every copy.
        let fault = &mut *self.fault;
        let r = self.sh.mrs.access_alone(self.sh.keys, rkey, self.by, va, 8, Need::RemoteAtomic, fault, |m, iova, o| {
            let mut b = [0u8; 8];
            m.read(iova, o, &mut b)?;
            orig = u64::from_ne_bytes(b);
            let new = match op {
                AtomicOp::Cas { compare, swap } => if orig == compare { swap } else { orig },
                AtomicOp::Faa { add } => orig.wrapping_add(add),
            };
            m.write(iova, o, &new.to_ne_bytes())
        });
        self.count(r).map(|()| orig)
    }

    fn atomic_write_remote(&mut self, rkey: u32, va: u64, bytes: &[u8; 8]) -> Result<(), MemError> {
        // Spec: MR-4.4.6 — remote write access, as an RDMA WRITE needs.
        if self.access & crate::mr::ACCESS_REMOTE_WRITE == 0 {
            return self.count(Err(MemError::Access));
        }
        if va & 7 != 0 {
            return Err(MemError::Operation);
        }
        // Under the table held alone, as the other atomics run: none of them
        // sees part of the store.
        let fault = &mut *self.fault;
        let r = self.sh.mrs.access_alone(self.sh.keys, rkey, self.by, va, 8, Need::RemoteWrite, fault, |m, iova, o| {
            m.write(iova, o, bytes)
        });
        self.count(r)
    }

    fn flush_remote(&mut self, rkey: u32, va: u64, len: u32, what: proto::Flush) -> Result<(), MemError> {
        // Spec: MR-4.4.7 — each placement type asked needs its flush right on the
        // QP and on the region. No region ever has the persistent right: the
        // device does not offer it (`IB_DEVICE_FLUSH_PERSISTENT`), so ib_core
        // refuses to register one.
        let mut rights = 0;
        if what.global {
            rights |= crate::mr::ACCESS_FLUSH_GLOBAL;
        }
        if what.persistent {
            rights |= crate::mr::ACCESS_FLUSH_PERSISTENT;
        }
        if self.access & rights != rights {
            return self.count(Err(MemError::Access));
        }
        let range = (!what.whole_region).then_some((va, u64::from(len)));
        // The copies that placed the earlier messages ran under the table's lock;
        // taking it orders them before this, and a CPU's stores to ordinary
        // memory are then visible to all: global visibility needs nothing more.
        let r = self.sh.mrs.check_rights(self.sh.keys, rkey, self.by, range, rights);
        self.count(r)
    }

    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        let i = wr_id as usize;
        let Some(s) = self.q.rq.get(i).copied().flatten() else { return Err(MemError::Access) };
        let base = i * self.q.max_recv_sge;
        let r = self.walk_slot(false, base, s.nsge as usize, offset, data.len(), |this, sge, off, range| {
            this.place(sge.lkey, sge.addr + off, Need::LocalWrite, &data[range])
        });
        self.count(r)
    }

    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        // Spec: MR-9.2.3 — only a valid fast-registration MR of the QP's PD or a
        // type 2 memory window this QP bound; anything else is an access error.
        let r = self.sh.mrs.invalidate(self.sh.keys, rkey, self.by);
        self.count(r)
    }

    /// The connection met a message without a receive WQE: on an SRQ, take one now
    /// and hand it over at once (it is then the connection's, as if posted).
    fn take_shared_recv(&mut self) -> Option<RecvWr> {
        let srq = self.sh.srq?;
        // Every WQE in the ring is the connection's already (nothing else feeds it).
        if self.q.rqr.fed != self.q.rqr.tail {
            return None;
        }
        let (slot, len) = take_from_srq(self.q, srq)?;
        self.q.rqr.fed = self.q.rqr.tail;
        Some(RecvWr { wr_id: slot as u64, len })
    }
}

#[kunit_tests(rdma_metaroce_engine)]
mod tests {
    use super::*;

    #[test]
    fn grh_carries_a_valid_ipv4_header() {
        let g = grh_ipv4([198, 18, 0, 1], [198, 18, 0, 2], 256);
        let h = &g[20..];
        assert_eq!(h[0], 0x45);
        assert_eq!(&h[12..16], &[198, 18, 0, 1]);
        assert_eq!(&h[16..20], &[198, 18, 0, 2]);
        // The one's-complement sum over a header with its checksum is all ones.
        let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        assert!(g[..20].iter().all(|b| *b == 0));
    }

    #[test]
    fn sge_walk_splits_ranges_across_elements() {
        let sges = [
            Sge { addr: 0x1000, length: 4, lkey: 1 },
            Sge { addr: 0x2000, length: 0, lkey: 2 },
            Sge { addr: 0x3000, length: 8, lkey: 3 },
        ];
        let mut seen = [(0u32, 0u64, 0usize, 0usize); 4];
        let mut n = 0;
        let r = QpMemory::walk(&mut (), |_, j| sges.get(j).copied(), sges.len(), 2, 6, |_, s, off, range| {
            seen[n] = (s.lkey, off, range.start, range.end);
            n += 1;
            Ok(())
        });
        assert_eq!(r, Ok(()));
        assert_eq!(&seen[..n], &[(1, 2, 0, 2), (3, 0, 2, 6)]);
        // Beyond the list's total length: an access error, not a short copy.
        assert_eq!(
            QpMemory::walk(&mut (), |_, j| sges.get(j).copied(), sges.len(), 10, 4, |_, _, _, _| Ok(())),
            Err(MemError::Access)
        );
        assert_eq!(sge_len(&sges), Ok(12));
    }

    #[test]
    fn tuning_defaults_pass_and_each_range_is_enforced() {
        let d = ConnTuning::DEFAULT;
        assert_eq!(d.check(), Ok(()));
        let bad = |t: ConnTuning| t.check().map_err(|why| why.split(':').next().unwrap_or(""));
        assert_eq!(bad(ConnTuning { initial_rtt_us: 0, ..d }), Err("initial_rtt_us"));
        assert_eq!(bad(ConnTuning { max_rto_us: d.min_rto_us - 1, ..d }), Err("max_rto_us"));
        assert_eq!(bad(ConnTuning { min_path_rto_us: d.max_rto_us + 1, ..d }), Err("max_rto_us"));
        assert_eq!(bad(ConnTuning { reply_wait_us: d.ack_delay_us + 1, ..d }), Err("reply_wait_us"));
        assert_eq!(bad(ConnTuning { init_window: 1023, ..d }), Err("init_window"));
        assert_eq!(bad(ConnTuning { max_window: 1023, ..d }), Err("max_window"));
        assert_eq!(bad(ConnTuning { ack_every: 0, ..d }), Err("ack_every"));
        assert_eq!(bad(ConnTuning { ecn_gain_shift: 17, ..d }), Err("ecn_gain_shift"));
        assert_eq!(bad(ConnTuning { cc_target_delay_us: 0, ..d }), Err("cc_target_delay_us"));
        // A connection configured from them carries them.
        let t = ConnTuning { initial_rtt_us: 7, ack_delay_us: 9, ack_every: 64, init_window: 4096, ecn_gain_shift: 0, ..d };
        let p = ConnectParams {
            remote_qpn: 2,
            remote_gid: [0; 16],
            sq_psn: Some(1),
            rq_psn: 1,
            mtu: 1024,
            rc_mtu: 0,
            num_paths: 2,
            max_rd_atomic: 1,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 0,
            timeout: 0,
            tuning: t,
        };
        let cfg = Engine::connection_config(3, QpType::Rc, 4096, 1, &p);
        assert_eq!(cfg.initial_rtt, Duration::from_micros(7));
        assert_eq!((cfg.ack_delay, cfg.ack_every), (Duration::from_micros(9), 64));
        assert_eq!(cfg.min_rto, Duration::from_micros(u64::from(d.min_rto_us)));
        assert_eq!(cfg.max_rto, Duration::from_micros(u64::from(d.max_rto_us)));
        assert_eq!((cfg.cc.init_window, cfg.cc.ecn_gain_shift), (4096, 0));
        // Spec: MR-7.1.2 — a Local ACK Timeout longer than the module's floor
        // raises it (and the ceiling with it); a shorter one leaves it.
        let with = |timeout| Engine::connection_config(3, QpType::Rc, 4096, 1, &ConnectParams { timeout, ..p });
        let rdma_cm = with(17);
        assert_eq!(rdma_cm.min_rto, Duration::from_nanos(4096 << 17));
        assert_eq!(rdma_cm.max_rto, Duration::from_nanos(4096 << 17));
        assert_eq!(with(14).min_rto, Duration::from_nanos(4096 << 14));
        assert_eq!(with(14).max_rto, Duration::from_micros(u64::from(d.max_rto_us)));
        assert_eq!(with(10).min_rto, Duration::from_micros(u64::from(d.min_rto_us)));
    }
}
