//! The RC connection state machine: one queue pair's transport state.
//!
//! A [`Connection`] is both a requester (it packetizes posted send WRs,
//! sprays them over paths, detects loss and retransmits) and a responder
//! (it places arriving requests, keeps receive order, runs reads and
//! atomics, and acknowledges). See the crate docs for how to drive it.
//!
//! Per-packet work is O(1) amortised: the in-flight table is a ring indexed
//! by TSN, each path threads its in-flight packets on an intrusive list in
//! send order (so per-path loss detection only looks at list heads), SACK
//! processing touches four 64-bit words plus the newly acknowledged packets,
//! and receive tracking is a 256-bit ring. The exceptions, all rare events,
//! are documented where they occur (RNR, go-back-N and timeouts walk the
//! window). No allocation happens anywhere: the whole state is the fixed
//! size reported by `size_of::<Connection>()` (spec MR-10.3).

use super::cc::{AckSignal, BaseRtt, CcConfig, PathCc};
use super::sack::Bits256;
use super::time::{Duration, Instant};
use super::verbs::{
    AtomicOp, Completion, Ecn, Flush, LocalMemory, MemError, Memory, PostError, RecvWr, Responder, SendWr,
    Transmit, WcOpcode, WcStatus, WrOpcode, WR_FENCE, WR_SIGNALED, WR_SOLICITED,
};
use super::wire::{
    rnr_timer_ns, AckRepr, AtomicRepr, BaseRepr, Body, Flags, Opcode, PacketRepr, Payload,
    RequestRepr, ResponseRepr, Syndrome, ACK_EXT_LEN, ACK_FLAG_DUP, ACK_FLAG_ECE, ACK_FLAG_MOVE, ACK_FLAG_PROBE,
    MAX_MTU, MIN_MTU,
};

/// Most paths one connection sprays over (MR-6.1.3).
pub const MAX_PATHS: usize = 8;
/// Packets in flight (TSN window), equal to the SACK width (MR-5.1.3). The
/// v1 minimums of MR-11.1.4 are all met by these constants.
pub const WINDOW: u32 = 256;
/// Send queue depth.
pub const SQ_DEPTH: usize = 64;
/// Receive queue depth.
pub const RQ_DEPTH: usize = 64;
/// Messages a requester may have outstanding beyond the oldest
/// unacknowledged one; responder message slots (MR-4.1.3).
pub const MSG_WINDOW: u32 = 32;
/// Outstanding RDMA READ + atomic requests per QP (max_rd_atomic, MR-4.4.2).
/// With 16, one QP's 64 KiB READs stalled for credits (1 MiB in flight over
/// the ~3 ms read round trip of a loaded software link).
pub const MAX_RD_ATOMIC: u32 = super::wire::MAX_RD_ATOMIC as u32;
/// Responder read/atomic response jobs, i.e. the atomic replay cache size
/// (MR-5.6.3): twice the outstanding requests a requester may have.
pub const RESP_JOBS: usize = 2 * MAX_RD_ATOMIC as usize;
/// Completion queue entries held by a connection.
pub const CQ_DEPTH: usize = SQ_DEPTH + RQ_DEPTH;
/// Bytes at the end of a message that are placed last (MR-4.3.3).
pub const TAIL_STASH: usize = 64;
/// Per-path reordering threshold in packets (MR-5.3.2).
pub const DUPTHRESH: u32 = 3;
/// Largest reordering window, in quarters of a path's srtt (MR-5.3.6).
pub const REO_MULT_MAX: u8 = 4;
/// Losses declared since the reordering window last grew after which it
/// shrinks by one quarter (MR-5.3.6).
pub const REO_QUIET_LOSSES: u8 = 16;
/// Largest message (2^31 bytes, as in verbs).
pub const MAX_MSG: u32 = 1 << 31;
/// Length of a PROBE on the wire: padded to the size of its ACK reply
/// (MR-9.3.3).
pub const PROBE_LEN: usize = BaseRepr::LEN + AckRepr::LEN;
/// Bytes of headers in front of the largest payload.
pub const MAX_HEADER: usize = BaseRepr::LEN + RequestRepr::LEN + AtomicRepr::LEN;

const NIL: u16 = 0xFFFF;
/// [`Connection::first_tx`] before the first packet.
const NEVER: u64 = u64::MAX;
const K_FREE: u8 = 0;
/// [`Pkt::rescued_from`] when no tail loss probe moved the packet.
const NO_PATH: u8 = u8::MAX;
const K_REQ: u8 = 1;
const K_RESP: u8 = 2;
const S_INFLIGHT: u8 = 1;
const S_LOST: u8 = 2;
const S_ACKED: u8 = 3;

/// Loss recovery flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Recovery {
    /// MetaRoCE v1: SACK, per-path loss detection, selective retransmission.
    Selective,
    /// RoCEv2-like go-back-N, for comparison only: not MetaRoCE v1
    /// (MR-11.1.3).
    GoBackN,
}

/// Connection configuration, normally filled from the verbs `modify_qp`
/// attributes and connection manager exchange (MR-7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Our QPN (24 bits); packets for any other QPN are dropped.
    pub local_qpn: u32,
    /// Peer QPN, written in every packet we send.
    pub remote_qpn: u32,
    /// First TSN we send; MUST be random (MR-9.1.1).
    pub initial_tsn: u32,
    /// First TSN the peer sends.
    pub peer_initial_tsn: u32,
    /// Also accept, until the first packet from the peer is accepted, a peer that
    /// starts at [`qpn_derived_tsn`]`(remote_qpn, local_qpn, initial_tsn)`: a responder-only
    /// peer that never learnt its `sq_psn` (MR-7.1.5).
    pub accept_derived_peer_tsn: bool,
    /// Payload bytes per packet ([`MIN_MTU`]..=[`MAX_MTU`]).
    pub mtu: u32,
    /// Paths to spray our sends over (1..=8).
    pub num_paths: u8,
    /// Paths the peer sprays over, from its parameter block (1..=8,
    /// MR-7.1.4; 0 means "same as `num_paths`"); data on path ids at or
    /// above it is dropped.
    pub peer_num_paths: u8,
    /// READ/atomic requests we keep outstanding: the smaller of ours and the
    /// peer's advertised value (MR-7.1.4), 1..=16.
    pub max_rd_atomic: u8,
    /// Seed for the UDP source ports of our paths (MR-6.1.1).
    pub src_port_base: u16,
    /// Transport retries before `RetryExcErr` (verbs `retry_cnt`, 0..=7).
    pub retry_cnt: u8,
    /// RNR retries before `RnrRetryExcErr`, 7 = infinite.
    pub rnr_retry: u8,
    /// RNR timer code we send in RNR NAKs (MR-3.5.6).
    pub min_rnr_timer: u8,
    /// Acknowledge at least every this many packets per path.
    pub ack_every: u8,
    /// Longest delay of an acknowledgement.
    pub ack_delay: Duration,
    /// How long an acknowledgement asked for with `ACK_REQ` may wait for a data
    /// packet of ours to carry it, while this side is itself sending (MR-5.4.6);
    /// zero: acknowledge at once. At most `ack_delay`.
    pub reply_wait: Duration,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// Floor of the per-path timeout.
    pub min_path_rto: Duration,
    /// Floor of the connection retransmission timeout.
    pub min_rto: Duration,
    /// Ceiling of timeouts after backoff.
    pub max_rto: Duration,
    /// Loss recovery flavour.
    pub recovery: Recovery,
    /// Repath persistently congested paths (MR-6.3.4).
    pub repath_congested: bool,
    /// Congestion control parameters.
    pub cc: CcConfig,
    /// Verbs UC service (MR-4.6): SEND and WRITE messages only, and a WRITE
    /// the responder cannot place is dropped rather than NAKed.
    pub uc: bool,
}

impl Config {
    /// Defaults (spec MR-8.6.1 table) for the given QPNs and initial TSNs.
    pub fn new(local_qpn: u32, remote_qpn: u32, initial_tsn: u32, peer_initial_tsn: u32) -> Self {
        Config {
            local_qpn: local_qpn & 0x00ff_ffff,
            remote_qpn: remote_qpn & 0x00ff_ffff,
            initial_tsn,
            peer_initial_tsn,
            accept_derived_peer_tsn: false,
            mtu: 4096,
            num_paths: 4,
            peer_num_paths: 0,
            max_rd_atomic: MAX_RD_ATOMIC as u8,
            src_port_base: 0xC000,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 40,
            ack_every: 4,
            ack_delay: Duration::from_micros(2),
            reply_wait: Duration::from_nanos(0),
            initial_rtt: Duration::from_micros(10),
            min_path_rto: Duration::from_micros(16),
            min_rto: Duration::from_micros(200),
            max_rto: Duration::from_millis(100),
            recovery: Recovery::Selective,
            repath_congested: true,
            cc: CcConfig::default(),
            uc: false,
        }
    }

    /// A configuration for tests: QPNs `local`/`remote`, TSNs derived from
    /// them so that two `test_pair(a, b)` / `test_pair(b, a)` match.
    pub fn test_pair(local: u32, remote: u32) -> Self {
        let tsn = |q: u32| q.wrapping_mul(0x9E37_79B9) ^ 0x5bd1_e995;
        let mut c = Config::new(local, remote, tsn(local), tsn(remote));
        c.src_port_base = 0xC000u16.wrapping_add((local as u16).wrapping_mul(64));
        c
    }
}

/// The initial TSN of the sends of a QP that was never given one (verbs: a QP
/// left in RTR, whose `sq_psn` is only set on the way to RTS, but which sends
/// READ and atomic responses). Both ends can compute it from the QP numbers and
/// the initial TSN of the receiver's own sends, which the sender was told as its
/// peer's (verbs: its `rq_psn`) (MR-7.1.5). Predictable, unlike a random
/// `sq_psn`: used only then. The receiver's TSN is mixed in because QP numbers
/// are reused: a new requester picks a new initial TSN, so the responses of an
/// earlier responder with the same numbers start elsewhere and its stragglers
/// miss the new window.
pub fn qpn_derived_tsn(sender_qpn: u32, receiver_qpn: u32, receiver_initial_tsn: u32) -> u32 {
    /// MurmurHash3's 64-bit finaliser, a bijection that spreads every input bit.
    fn fmix64(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    let pair = (u64::from(sender_qpn & 0x00ff_ffff) << 24) | u64::from(receiver_qpn & 0x00ff_ffff);
    fmix64(fmix64(pair) ^ u64::from(receiver_initial_tsn)) as u32
}

/// Transport state of the QP (MR-7.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum QpState {
    /// Ready to send (verbs RTS, which includes RTR behaviour).
    Rts,
    /// Error: outstanding work flushed, packets dropped.
    Error,
}

/// Health of one path (MR-6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PathStatus {
    /// In use.
    Active,
    /// Timed out once; not used for new data until a probe is answered.
    Suspect,
    /// Failed; repathed to a new source port and probed with backoff.
    Failed,
}

/// Read-only view of a path for diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    /// Health.
    pub status: PathStatus,
    /// Current UDP source port.
    pub src_port: u16,
    /// Congestion window (bytes).
    pub cwnd: u32,
    /// Bytes in flight.
    pub inflight: u32,
    /// Smoothed RTT (ns).
    pub srtt_ns: u32,
    /// RTT variation (ns), which widens the loss-detection window for packets
    /// overtaken on other paths (MR-5.3.3).
    pub rttvar_ns: u32,
    /// Times this path was repathed.
    pub generation: u16,
}

/// Counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Packets transmitted (all kinds).
    pub tx_packets: u64,
    /// Data packets transmitted for the first time.
    pub tx_data: u64,
    /// Data packets retransmitted.
    pub tx_retx: u64,
    /// ACK/NAK packets transmitted.
    pub tx_acks: u64,
    /// Acknowledgements carried by data packets instead (MR-5.4.6).
    pub tx_piggybacked: u64,
    /// Probes transmitted.
    pub tx_probes: u64,
    /// Packets received and parsed.
    pub rx_packets: u64,
    /// Received packets dropped as malformed or misaddressed.
    pub rx_invalid: u64,
    /// Of `rx_invalid`, those that did not parse (MR-3.1.5): a receiver that
    /// routes datagrams on their headers alone ([`PacketRepr::route`])
    /// counts its malformed ones from this.
    pub rx_malformed: u64,
    /// Of `rx_invalid`, data packets whose TSN lies a window or more beyond the
    /// next one expected (MR-5.2.4).
    pub rx_beyond_window: u64,
    /// Of `rx_invalid`, acknowledgements (alone or carried) whose cumulative TSN
    /// is beyond what was sent, or before the first TSN sent, ignored
    /// (MR-5.2.3, MR-9.3.1).
    pub rx_acks_beyond_sent: u64,
    /// Duplicate data packets received.
    pub rx_dup: u64,
    /// Losses declared by SACK/RACK.
    pub lost_detected: u64,
    /// Per-path timeouts.
    pub path_timeouts: u64,
    /// Of `path_timeouts`, those declared because a run of a path's packets (3,
    /// more once reordering is seen) were overtaken by later packets of other
    /// paths, tail-loss-probe copies included (MR-5.3.4), with none of its own
    /// acknowledged (MR-5.3.3) rather than by the path's RTO.
    pub path_timeouts_overtaken: u64,
    /// Connection retransmission timeouts.
    pub rto: u64,
    /// Tail loss probes sent.
    pub tlp: u64,
    /// Repaths (source port changes), for any reason.
    pub repaths: u64,
    /// Repaths away from a persistently congested path (MR-6.3.4).
    pub congestion_repaths: u64,
    /// Paths moved at the receiver's request (MR-6.3.5).
    pub moved_paths: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// READ_RESP retransmissions that could no longer read the memory and
    /// went out as a NAK instead, the connection staying up (MR-5.6.5).
    pub stale_read_naks: u64,
    /// Fatal NAKs received for a message that had already completed, and
    /// discarded (MR-5.6.5).
    pub rx_stale_naks: u64,
    /// Data packets received with the IP ECN field set to CE (MR-2.5.2).
    pub rx_ce: u64,
    /// Data packets accepted ahead of a missing one and placed at once
    /// (out-of-order placement, MR-4.1.3).
    pub rx_out_of_order: u64,
    /// UC messages the responder could not place and dropped (MR-4.6.2).
    pub uc_dropped: u64,
    /// Received packets refused because their memory was not resident, as if
    /// lost (MR-9.2.5: handed in again by the driver or resent by the peer).
    pub rx_faults: u64,
    /// Packets whose payload could not be read because the memory was not
    /// resident, counted lost and resent later (MR-9.2.5).
    pub tx_faults: u64,
    /// Times delivery stopped at a message whose memory was not resident
    /// (MR-9.2.5).
    pub delivery_faults: u64,
}

#[derive(Debug, Clone, Copy)]
struct SqEntry {
    wr: SendWr,
    ssn: u32,
    next_off: u32,
    pkts_total: u32,
    pkts_acked: u32,
    resp_bytes: u32,
    started: bool,
    fully_sent: bool,
    resp_last: bool,
    resp_done: bool,
    /// TSN of the request's first packet (a READ or atomic request has one
    /// packet, which its response acknowledges: MR-5.2.5).
    req_tsn: u32,
}

impl SqEntry {
    const EMPTY: SqEntry = SqEntry {
        wr: SendWr {
            wr_id: 0,
            opcode: WrOpcode::Send,
            len: 0,
            remote_va: 0,
            rkey: 0,
            imm: 0,
            compare: 0,
            swap_add: 0,
            flags: 0,
        },
        ssn: 0,
        next_off: 0,
        pkts_total: 0,
        pkts_acked: 0,
        resp_bytes: 0,
        started: false,
        fully_sent: false,
        resp_last: false,
        resp_done: false,
        req_tsn: 0,
    };
    fn transport_done(&self) -> bool {
        self.fully_sent && self.pkts_acked == self.pkts_total
    }
    /// Spec: MR-4.3.1 — a request without a response completes once all its
    /// packets are acknowledged *and* the responder reports it delivered
    /// (placed in message order, tail included); READ/atomic once the whole
    /// response arrived.
    fn done(&self, msn: u32, peer_msn: u32) -> bool {
        self.transport_done()
            && if self.wr.opcode.has_response() {
                self.resp_done
            } else {
                seq_lt(msn, peer_msn)
            }
    }
}

/// In-flight packet metadata, 32 bytes (MR-10.3).
#[derive(Debug, Clone, Copy)]
struct Pkt {
    sent: u64,
    offset: u32,
    psn: u32,
    msn: u32,
    len: u16,
    prev: u16,
    next: u16,
    kind: u8,
    path: u8,
    state: u8,
    slot: u8,
    retx: u8,
    /// The path this packet was on when a tail loss probe (MR-5.3.4) moved
    /// it to another one, or [`NO_PATH`]: if the probe's copy is
    /// acknowledged first, the original was overtaken on that path.
    rescued_from: u8,
}

impl Pkt {
    const EMPTY: Pkt = Pkt {
        sent: 0,
        offset: 0,
        psn: 0,
        msn: 0,
        len: 0,
        prev: NIL,
        next: NIL,
        kind: K_FREE,
        path: 0,
        state: 0,
        slot: 0,
        retx: 0,
        rescued_from: NO_PATH,
    };
}

#[derive(Debug, Clone, Copy)]
struct Path {
    status: PathStatus,
    generation: u16,
    psn_next: u32,
    acked_psn: u32,
    has_acked_psn: bool,
    head: u16,
    tail: u16,
    inflight: u32,
    srtt: u32,
    rttvar: u32,
    base_rtt: BaseRtt,
    /// Echo PSN of the ACK that gave the latest RTT sample (MR-5.5.1).
    rtt_echo_psn: u32,
    has_rtt: bool,
    cc: PathCc,
    timeouts: u8,
    /// Packets of this path declared lost through a later packet of another path
    /// since one of its own was last acknowledged (MR-5.3.3).
    lost_unseen: u8,
    /// When the first packet of the current `lost_unseen` run was sent (0:
    /// none): the packets the run takes off the path do not restart the
    /// path's RTO once it has two (MR-5.3.5).
    overtaken_since: u64,
    backoff: u8,
    probe_pending: bool,
    probe_at: u64,
    probe_deadline: u64,
    hot_since: u64,
    last_repath: u64,
    acked_bytes: u32,
    // Receive side (packets the peer sent on this path index).
    rx_seen: bool,
    rx_psn: u32,
    rx_ts: u32,
    rx_at: u64,
    rx_ce: u16,
    rx_cnt: u16,
    rx_unacked: u16,
    /// Highest TSN accepted on this path since its last ACK (meaningful while
    /// `rx_unacked > 0`): another path's ACK whose cumulative TSN passes it
    /// acknowledges all of them (MR-5.4.1).
    rx_tsn_hi: u32,
    rx_port: u16,
    ack_due: u64,
    ack_now: bool,
    probe_reply: bool,
    probe_ts: u32,
    dup: bool,
    /// The receiver asks the peer to move this path (MR-6.3.5), on its next ACK.
    move_asked: bool,
}

impl Path {
    fn new(cwnd: u32, rtt: u32) -> Path {
        Path {
            status: PathStatus::Active,
            generation: 0,
            psn_next: 0,
            acked_psn: 0,
            has_acked_psn: false,
            head: NIL,
            tail: NIL,
            inflight: 0,
            srtt: rtt,
            rttvar: rtt / 2,
            base_rtt: BaseRtt::new(rtt),
            rtt_echo_psn: 0,
            has_rtt: false,
            cc: PathCc::new(cwnd),
            timeouts: 0,
            lost_unseen: 0,
            overtaken_since: 0,
            backoff: 0,
            probe_pending: false,
            probe_at: 0,
            probe_deadline: 0,
            hot_since: 0,
            last_repath: 0,
            acked_bytes: 0,
            rx_seen: false,
            rx_psn: 0,
            rx_ts: 0,
            rx_at: 0,
            rx_ce: 0,
            rx_cnt: 0,
            rx_unacked: 0,
            rx_tsn_hi: 0,
            rx_port: 0,
            ack_due: 0,
            ack_now: false,
            probe_reply: false,
            probe_ts: 0,
            dup: false,
            move_asked: false,
        }
    }

    /// The path has a deadline of its own (see `Connection::timed_paths`).
    fn has_deadline(&self) -> bool {
        self.head != NIL || self.probe_deadline != 0 || self.status == PathStatus::Failed
    }

    /// Spec: MR-6.3.4, MR-6.3.5 — a path is repathed for its congestion or at
    /// its receiver's request at most once per 64 of its RTTs.
    fn may_repath(&self, now: u64) -> bool {
        self.last_repath == 0 || now.saturating_sub(self.last_repath) >= 64 * (self.srtt as u64).max(1)
    }
}

#[derive(Debug, Clone, Copy)]
struct MsgSlot {
    active: bool,
    complete: bool,
    got_last: bool,
    solicited: bool,
    recv_len_err: bool,
    op: u8,
    err: u8,
    tail_len: u8,
    msn: u32,
    ssn: u32,
    msg_len: u32,
    received: u32,
    imm: u32,
    rkey: u32,
    err_tsn: u32,
    tsn: u32,
    tail_off: u32,
    va: u64,
    recv_wr: u64,
    atomic: AtomicRepr,
    tail: [u8; TAIL_STASH],
}

impl MsgSlot {
    const EMPTY: MsgSlot = MsgSlot {
        active: false,
        complete: false,
        got_last: false,
        solicited: false,
        recv_len_err: false,
        op: 0,
        err: 0,
        tail_len: 0,
        msn: 0,
        ssn: 0,
        msg_len: 0,
        received: 0,
        imm: 0,
        rkey: 0,
        err_tsn: 0,
        tsn: 0,
        tail_off: 0,
        va: 0,
        recv_wr: 0,
        atomic: AtomicRepr {
            swap_add: 0,
            compare: 0,
        },
        tail: [0; TAIL_STASH],
    };
}

/// A responder job: an RDMA READ or atomic response being sent. Atomic jobs
/// are the replay cache: the original value lives here until every response
/// packet is acknowledged (MR-5.6).
#[derive(Debug, Clone, Copy)]
struct Job {
    atomic: bool,
    msn: u32,
    req_tsn: u32,
    rkey: u32,
    len: u32,
    next_off: u32,
    pkts_total: u32,
    pkts_acked: u32,
    fully_sent: bool,
    /// One of the requester's paths (the one whose packet delivered the
    /// request): a NAK of the job names it (MR-3.2.6). The path a response
    /// is sent on is one of ours, which the requester may not have.
    req_path: u8,
    va: u64,
    orig: u64,
}

impl Job {
    const EMPTY: Job = Job {
        atomic: false,
        msn: 0,
        req_tsn: 0,
        rkey: 0,
        len: 0,
        next_off: 0,
        pkts_total: 0,
        pkts_acked: 0,
        fully_sent: false,
        req_path: 0,
        va: 0,
        orig: 0,
    };
}

/// `Option` replacement whose all-zero bit pattern is valid (`None`), so
/// that the whole `Connection` is valid when zero-filled (MR-10.2.2).
#[derive(Debug, Clone, Copy)]
struct Maybe<T: Copy> {
    set: bool,
    val: T,
}

impl<T: Copy> Maybe<T> {
    fn some(val: T) -> Self {
        Maybe { set: true, val }
    }
    fn get(&self) -> Option<T> {
        if self.set {
            Some(self.val)
        } else {
            None
        }
    }
    fn take(&mut self) -> Option<T> {
        let v = self.get();
        self.set = false;
        v
    }
    fn is_none(&self) -> bool {
        !self.set
    }
}

impl Maybe<PendingNak> {
    const NONE_NAK: Self = Maybe {
        set: false,
        val: PendingNak {
            syndrome: Syndrome::Ack,
            msn: 0,
            tsn: 0,
            path: 0,
        },
    };
}

impl Maybe<u32> {
    const NONE_U32: Self = Maybe { set: false, val: 0 };
}

impl Maybe<u8> {
    const NONE_U8: Self = Maybe { set: false, val: 0 };
}

/// Stored completion; zero-valid unlike `Completion` (which has `Option`s).
#[derive(Debug, Clone, Copy)]
struct Cqe {
    wr_id: u64,
    byte_len: u32,
    imm: u32,
    inv: u32,
    status: WcStatus,
    opcode: WcOpcode,
    has_imm: bool,
    has_inv: bool,
    solicited: bool,
}

impl Cqe {
    const EMPTY: Cqe = Cqe {
        wr_id: 0,
        byte_len: 0,
        imm: 0,
        inv: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        has_imm: false,
        has_inv: false,
        solicited: false,
    };
    fn put(c: Completion) -> Cqe {
        Cqe {
            wr_id: c.wr_id,
            byte_len: c.byte_len,
            imm: c.imm.unwrap_or(0),
            inv: c.invalidated_rkey.unwrap_or(0),
            status: c.status,
            opcode: c.opcode,
            has_imm: c.imm.is_some(),
            has_inv: c.invalidated_rkey.is_some(),
            solicited: c.solicited,
        }
    }
    fn get(&self) -> Completion {
        Completion {
            wr_id: self.wr_id,
            status: self.status,
            opcode: self.opcode,
            byte_len: self.byte_len,
            imm: if self.has_imm { Some(self.imm) } else { None },
            invalidated_rkey: if self.has_inv { Some(self.inv) } else { None },
            solicited: self.solicited,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct PendingNak {
    syndrome: Syndrome,
    msn: u32,
    tsn: u32,
    path: u8,
}

/// Outcome of a received reliable packet. Responses are reliable packets
/// of the peer's direction (MR-3.4.2).
enum Verdict {
    Accept,
    Rnr,
    Drop,
}

/// One RC queue pair's transport state. Fixed size, no heap (MR-10.3.1,
/// MR-9.4.1); O(1) amortised per packet (MR-10.3.2).
#[derive(Debug, Clone)]
pub struct Connection {
    cfg: Config,
    state: QpState,
    stats: Stats,
    // Requester.
    sq: [SqEntry; SQ_DEPTH],
    sq_head: u32,
    sq_send: u32,
    sq_tail: u32,
    msg_una: u32,
    peer_msn: u32,
    next_ssn: u32,
    rd_outstanding: u32,
    pkts: [Pkt; WINDOW as usize],
    unacked: Bits256,
    snd_una: u32,
    snd_nxt: u32,
    lost: Bits256,
    paths: [Path; MAX_PATHS],
    /// Bit `q` is set while path `q` may want an acknowledgement sent
    /// (`ack_now`, `probe_reply` or `ack_due`: the triggers of MR-5.4.1 and
    /// MR-6.4.2, unchanged by this summary): the scans that run on every
    /// transmission poll and timer query look only at those paths. Set with
    /// the flags; a bit whose path wants nothing is cleared by the next
    /// transmission poll (a set bit over clear flags costs one look).
    ack_wanted: u8,
    /// Bit `q` is set exactly while path `q` has a deadline of its own for
    /// [`Self::poll_timeout`]: packets in flight (the path RTO of MR-5.5.2 and
    /// the loss timer of MR-5.3.3), a probe awaiting its answer or a failed
    /// path's next probe (MR-6.4.3); [`Self::refresh_timed`] keeps it.
    timed_paths: u8,
    rr: u8,
    peer_credit: u32,
    last_ack: u64,
    /// Latest send time of any packet acknowledged so far, on any path (MR-5.3.3).
    rack_sent: u64,
    /// How far packets have been seen to overtake others on one path, in quarters
    /// of its srtt (0: no reordering seen; MR-5.3.6), and when it last grew.
    reo_mult: u8,
    reo_grown_at: u64,
    /// Losses declared since the window last grew (MR-5.3.6).
    reo_losses: u8,
    last_progress: u64,
    /// When a data packet was last transmitted (0: never), for MR-5.4.6.
    last_data_tx: u64,
    /// When this connection first sent a packet ([`NEVER`]: not yet): an
    /// echoed timestamp from before it is not ours (MR-5.5.1).
    first_tx: u64,
    rto_backoff: u8,
    retries: u8,
    tlp_pending: bool,
    tlp_done: bool,
    /// Spec: MR-5.5.4 — a wait for a delivery report (or responses) ended,
    /// asking the peer with a probe where a path was free for one, and no
    /// ACK has come since: the next such deadline counts a retry.
    report_wait_unanswered: bool,
    rnr_until: u64,
    rnr_retries: u8,
    // Responder.
    rcv_nxt: u32,
    rcv_bits: Bits256,
    msgs: [MsgSlot; MSG_WINDOW as usize],
    msg_cum: u32,
    rq: [RecvWr; RQ_DEPTH],
    rq_head: u32,
    rq_tail: u32,
    jobs: [Job; RESP_JOBS],
    job_head: u32,
    job_send: u32,
    job_tail: u32,
    nak: Maybe<PendingNak>,
    /// Spec: MR-7.3.2 — the fatal NAK of a message found in error at its
    /// turn, until the responses to earlier messages are acknowledged; then
    /// the error state is entered, which makes it the pending NAK. Delivery
    /// stops meanwhile.
    nak_after_responses: Maybe<PendingNak>,
    /// Half the TSN space or more has been sent: acknowledgements are then
    /// bounded by sequence comparison alone (MR-5.2.3).
    sent_half_space: bool,
    /// Half the TSN space or more has been received: duplicates are then
    /// bounded by sequence comparison alone (MR-5.2.2).
    received_half_space: bool,
    gbn_nak_at: Maybe<u32>,
    /// Delivery stopped at a message whose memory was not resident (MR-9.2.5):
    /// the path to report progress on once it resumes.
    delivery_stalled: Maybe<u8>,
    /// The path whose ACK repeats once the consumer closed the QP (MR-5.4.7).
    last_word: Maybe<u8>,
    /// The consumer closed the QP (MR-5.4.7): its last word is said once.
    closed: bool,
    credit_hint: u16,
    // Completions.
    cq: [Cqe; CQ_DEPTH],
    cq_head: u32,
    cq_len: u32,
}

/// The paths whose bits are set in a per-path summary (`ack_wanted`,
/// `timed_paths`), lowest first.
fn paths_in(mask: u8) -> impl Iterator<Item = usize> {
    let mut left = mask;
    core::iter::from_fn(move || {
        (left != 0).then(|| {
            let q = left.trailing_zeros() as usize;
            left &= left - 1;
            q
        })
    })
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Clamps out-of-range configuration values (shared by `new` and `reset`).
fn normalise(mut cfg: Config) -> Config {
    // Spec: MR-2.6.1 (MTU range), MR-6.1.3 (1..=8 paths).
    cfg.mtu = cfg.mtu.clamp(MIN_MTU as u32, MAX_MTU as u32);
    cfg.num_paths = cfg.num_paths.clamp(1, MAX_PATHS as u8);
    if cfg.peer_num_paths == 0 {
        cfg.peer_num_paths = cfg.num_paths;
    }
    cfg.peer_num_paths = cfg.peer_num_paths.clamp(1, MAX_PATHS as u8);
    if cfg.recovery == Recovery::GoBackN {
        cfg.num_paths = 1;
        cfg.peer_num_paths = 1;
    }
    cfg.ack_every = cfg.ack_every.max(1);
    // Spec: MR-5.4.6 — a deferred acknowledgement still meets MR-5.4.1's bound.
    if cfg.reply_wait.as_nanos() > cfg.ack_delay.as_nanos() {
        cfg.reply_wait = cfg.ack_delay;
    }
    cfg.max_rd_atomic = cfg.max_rd_atomic.clamp(1, MAX_RD_ATOMIC as u8);
    cfg
}

/// Initial per-path state for a (normalised) configuration.
fn init_paths(paths: &mut [Path; MAX_PATHS], cfg: &Config) {
    let n = cfg.num_paths as u32;
    // Spec: MR-8.2.2 — initial window split over the paths.
    let cwnd = cfg.cc.init_window.checked_div(n).unwrap_or(0).max(cfg.mtu);
    let rtt = cfg.initial_rtt.as_nanos().min(u32::MAX as u64) as u32;
    paths.fill(Path::new(cwnd, rtt));
    for (i, p) in paths.iter_mut().enumerate() {
        // Spec: MR-9.1.1 — path PSNs start at unpredictable values.
        p.psn_next = cfg.initial_tsn.rotate_left((i as u32).wrapping_mul(4))
            ^ (i as u32).wrapping_mul(0x2545_F491);
    }
}

impl Connection {
    /// Creates a connection in RTS (MR-7.1). Out-of-range configuration
    /// values are clamped (`mtu` to [`MIN_MTU`]..=[`MAX_MTU`], `num_paths` to 1..=8;
    /// go-back-N forces one path).
    ///
    /// Not compiled into the kernel module: the value is built in this
    /// function's frame, 27 KB there, more than a kernel stack holds (the
    /// module's stack-frame check, `selftests/stack-frames.sh`, fails on it).
    /// Kernel code allocates a zeroed connection and calls [`Connection::reset`]
    /// (MR-10.2.2).
    #[cfg(not(CONFIG_RUST))]
    pub fn new(cfg: Config) -> Connection {
        let cfg = normalise(cfg);
        let mut paths = [Path::new(0, 0); MAX_PATHS];
        init_paths(&mut paths, &cfg);
        Connection {
            cfg,
            state: QpState::Rts,
            stats: Stats::default(),
            sq: [SqEntry::EMPTY; SQ_DEPTH],
            sq_head: 0,
            sq_send: 0,
            sq_tail: 0,
            msg_una: 0,
            peer_msn: 0,
            next_ssn: 0,
            rd_outstanding: 0,
            pkts: [Pkt::EMPTY; WINDOW as usize],
            unacked: Bits256::new(),
            snd_una: cfg.initial_tsn,
            snd_nxt: cfg.initial_tsn,
            lost: Bits256::new(),
            paths,
            ack_wanted: 0,
            timed_paths: 0,
            rr: 0,
            peer_credit: u32::MAX,
            last_ack: 0,
            rack_sent: 0,
            reo_mult: 0,
            reo_grown_at: 0,
            reo_losses: 0,
            last_progress: 0,
            last_data_tx: 0,
            first_tx: NEVER,
            rto_backoff: 0,
            retries: 0,
            tlp_pending: false,
            tlp_done: false,
            report_wait_unanswered: false,
            rnr_until: 0,
            rnr_retries: 0,
            rcv_nxt: cfg.peer_initial_tsn,
            rcv_bits: Bits256::new(),
            msgs: [MsgSlot::EMPTY; MSG_WINDOW as usize],
            msg_cum: 0,
            rq: [RecvWr { wr_id: 0, len: 0 }; RQ_DEPTH],
            rq_head: 0,
            rq_tail: 0,
            jobs: [Job::EMPTY; RESP_JOBS],
            job_head: 0,
            job_send: 0,
            job_tail: 0,
            nak: Maybe::NONE_NAK,
            nak_after_responses: Maybe::NONE_NAK,
            sent_half_space: false,
            received_half_space: false,
            gbn_nak_at: Maybe::NONE_U32,
            delivery_stalled: Maybe::NONE_U8,
            last_word: Maybe::NONE_U8,
            closed: false,
            credit_hint: 0xFFFF,
            cq: [Cqe::EMPTY; CQ_DEPTH],
            cq_head: 0,
            cq_len: 0,
        }
    }

    /// Re-initialises this connection in place, as `new(cfg)` would, without
    /// building a second `Connection` on the stack. Kernel drivers allocate
    /// the state once on the heap and call this (MR-10.2.2).
    pub fn reset(&mut self, cfg: Config) {
        let cfg = normalise(cfg);
        init_paths(&mut self.paths, &cfg);
        self.cfg = cfg;
        self.state = QpState::Rts;
        self.stats = Stats::default();
        self.sq.fill(SqEntry::EMPTY);
        self.sq_head = 0;
        self.sq_send = 0;
        self.sq_tail = 0;
        self.msg_una = 0;
        self.peer_msn = 0;
        self.next_ssn = 0;
        self.rd_outstanding = 0;
        self.pkts.fill(Pkt::EMPTY);
        self.unacked = Bits256::new();
        self.snd_una = cfg.initial_tsn;
        self.snd_nxt = cfg.initial_tsn;
        self.lost = Bits256::new();
        self.ack_wanted = 0;
        self.timed_paths = 0;
        self.rr = 0;
        self.peer_credit = u32::MAX;
        self.last_ack = 0;
        self.last_data_tx = 0;
        self.first_tx = NEVER;
        self.rack_sent = 0;
        self.reo_mult = 0;
        self.reo_grown_at = 0;
        self.reo_losses = 0;
        self.last_progress = 0;
        self.rto_backoff = 0;
        self.retries = 0;
        self.tlp_pending = false;
        self.tlp_done = false;
        self.report_wait_unanswered = false;
        self.rnr_until = 0;
        self.rnr_retries = 0;
        self.rcv_nxt = cfg.peer_initial_tsn;
        self.rcv_bits = Bits256::new();
        self.msgs.fill(MsgSlot::EMPTY);
        self.msg_cum = 0;
        self.rq.fill(RecvWr { wr_id: 0, len: 0 });
        self.rq_head = 0;
        self.rq_tail = 0;
        self.jobs.fill(Job::EMPTY);
        self.job_head = 0;
        self.job_send = 0;
        self.job_tail = 0;
        self.nak = Maybe::NONE_NAK;
        self.nak_after_responses = Maybe::NONE_NAK;
        self.sent_half_space = false;
        self.received_half_space = false;
        self.gbn_nak_at = Maybe::NONE_U32;
        self.delivery_stalled = Maybe::NONE_U8;
        self.last_word = Maybe::NONE_U8;
        self.closed = false;
        self.credit_hint = 0xFFFF;
        self.cq.fill(Cqe::EMPTY);
        self.cq_head = 0;
        self.cq_len = 0;
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Transport state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Sequence state, for diagnostics: the oldest unacknowledged TSN sent, the
    /// next TSN to send, the next TSN expected from the peer, and whether the
    /// peer's QPN-derived TSN may still be adopted (MR-7.1.5).
    pub fn tsn_state(&self) -> (u32, u32, u32, bool) {
        (self.snd_una, self.snd_nxt, self.rcv_nxt, self.cfg.accept_derived_peer_tsn)
    }

    /// Diagnostics for path `p`.
    pub fn path_info(&self, p: usize) -> Option<PathInfo> {
        let path = self.paths.get(p)?;
        if p >= self.cfg.num_paths as usize {
            return None;
        }
        Some(PathInfo {
            status: path.status,
            src_port: self.path_port(p),
            cwnd: path.cc.cwnd,
            inflight: path.inflight,
            srtt_ns: path.srtt,
            rttvar_ns: path.rttvar,
            generation: path.generation,
        })
    }

    /// The reordering multiplier *m* of MR-5.3.6 (0 until a duplicate was
    /// reported), for diagnostics.
    pub fn reordering_multiplier(&self) -> u8 {
        self.reo_mult
    }

    /// Smallest buffer `poll_transmit` needs: headers plus one MTU.
    pub fn max_packet_len(&self) -> usize {
        MAX_HEADER + self.cfg.mtu as usize
    }

    /// Sets the credit hint advertised to the peer, in bytes (`None`: no
    /// limit). The host computes it, e.g. its receive BDP divided by the
    /// number of active senders (MR-8.4.1).
    pub fn set_credit_hint(&mut self, bytes: Option<u32>) {
        self.credit_hint = match bytes {
            None => 0xFFFF,
            Some(b) => (b / 256).clamp(1, 0xFFFE) as u16,
        };
    }

    /// True while a posted send-queue WR has not completed.
    pub fn sends_outstanding(&self) -> bool {
        self.sq_head != self.sq_tail
    }

    /// True when no work is queued, in flight or awaiting completion polling.
    pub fn is_idle(&self) -> bool {
        self.sq_head == self.sq_tail
            && self.snd_una == self.snd_nxt
            && self.job_head == self.job_tail
            && self.cq_len == 0
    }

    /// Checks the in-flight bookkeeping of the requester side (MR-5.3.1, and
    /// the definition of `inflight(p)` in MR-8.1.1) and returns the first
    /// inconsistency found. For tests and
    /// debugging; O(window + paths), allocates nothing.
    ///
    /// * every path's list holds only in-flight (neither lost nor
    ///   acknowledged) packets of the send window, last sent on that path,
    ///   in strictly increasing PSN order;
    /// * every in-flight packet of the window is on its path's list;
    /// * each path's `inflight` equals the bytes of the packets on its list,
    ///   so the sum of per-path `inflight` equals the bytes of the
    ///   unacknowledged in-flight packets;
    /// * a path past `num_paths` carries nothing.
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        let outstanding = self.snd_nxt.wrapping_sub(self.snd_una);
        if outstanding > WINDOW {
            return Err("more than WINDOW TSNs outstanding");
        }
        let mut listed = 0u32;
        let mut listed_bytes = 0u64;
        for (q, path) in self.paths.iter().enumerate() {
            let mut bytes = 0u64;
            let mut i = path.head;
            let mut prev = NIL;
            let mut steps = 0u32;
            while i != NIL {
                steps += 1;
                if steps > WINDOW {
                    return Err("path list is cyclic");
                }
                let k = match self.pkts.get(i as usize) {
                    Some(k) => k,
                    None => return Err("path list index out of range"),
                };
                if k.prev != prev {
                    return Err("path list back link broken");
                }
                let t = self.tsn_of(i);
                if !seq_lt(t, self.snd_nxt) || outstanding == 0 {
                    return Err("path list holds a packet outside the send window");
                }
                if k.kind == K_FREE {
                    return Err("path list holds a freed packet");
                }
                if k.state != S_INFLIGHT {
                    return Err("path list holds a lost or acknowledged packet");
                }
                if k.path as usize != q {
                    return Err("packet listed on a path it was not sent on");
                }
                if prev != NIL && !seq_lt(self.pkts[prev as usize].psn, k.psn) {
                    return Err("path list not in PSN order");
                }
                bytes += k.len as u64;
                prev = i;
                i = k.next;
            }
            if path.tail != prev {
                return Err("path list tail mismatch");
            }
            if bytes != path.inflight as u64 {
                return Err("path inflight differs from the bytes on its list");
            }
            if q >= self.cfg.num_paths as usize && (path.inflight != 0 || path.head != NIL) {
                return Err("unused path carries packets");
            }
            if (path.ack_now || path.probe_reply || path.ack_due != 0) && self.ack_wanted & (1 << q) == 0 {
                return Err("a path wants an acknowledgement its summary bit does not show");
            }
            if path.has_deadline() != (self.timed_paths & (1 << q) != 0) {
                return Err("a path's deadline summary bit is stale");
            }
            listed += steps;
            listed_bytes += bytes;
        }
        let mut flying = 0u32;
        let mut flying_bytes = 0u64;
        let mut t = self.snd_una;
        while t != self.snd_nxt {
            let k = &self.pkts[(t % WINDOW) as usize];
            if k.kind != K_FREE && k.state == S_INFLIGHT {
                flying += 1;
                flying_bytes += k.len as u64;
            }
            if (k.state == S_ACKED) == self.unacked.get(t) {
                return Err("unacked bitmap disagrees with packet state");
            }
            t = t.wrapping_add(1);
        }
        if flying != listed || flying_bytes != listed_bytes {
            return Err("an in-flight packet is missing from its path list");
        }
        Ok(())
    }

    // ------------------------------------------------------------------
    // Posting (MR-4.1, MR-7.4)
    // ------------------------------------------------------------------

    /// Spec: MR-4.5.1 — CQ space is reserved when a WR is posted.
    fn cq_room(&self) -> u32 {
        CQ_DEPTH as u32
            - self.cq_len
            - self.sq_tail.wrapping_sub(self.sq_head)
            - self.rq_tail.wrapping_sub(self.rq_head)
    }

    /// Posts a send-queue work request.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        // Spec: MR-2.2.3 (message size), MR-4.4.5 (atomic alignment),
        // MR-4.4.6 (ATOMIC_WRITE: 8 aligned bytes).
        let eight_aligned = wr.len == 8 && wr.remote_va & 7 == 0;
        if wr.len > MAX_MSG
            || (wr.opcode.has_response() && wr.opcode != WrOpcode::Read && !eight_aligned)
            || (wr.opcode == WrOpcode::AtomicWrite && !eight_aligned)
            // Spec: MR-3.3.5 — a FLUSH names a placement type.
            || (wr.opcode == WrOpcode::Flush && Flush::from_bits(wr.imm).is_none())
            // Spec: MR-4.6.1 — UC carries SEND and WRITE messages only.
            || (self.cfg.uc && !wr.opcode.wire().allowed_on_uc())
        {
            return Err(PostError::Invalid);
        }
        if self.cq_room() == 0 || self.sq_tail.wrapping_sub(self.sq_head) >= SQ_DEPTH as u32 {
            return Err(PostError::QueueFull);
        }
        if self.state == QpState::Error {
            // Spec: MR-7.3.4 — posts to an errored QP complete with flush.
            self.push_cq(Completion::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::of(wr.opcode), 0));
            return Ok(());
        }
        let mut e = SqEntry::EMPTY;
        e.wr = wr;
        if wr.opcode.wire().consumes_recv() {
            e.ssn = self.next_ssn;
            self.next_ssn = self.next_ssn.wrapping_add(1);
        }
        self.sq[(self.sq_tail as usize) % SQ_DEPTH] = e;
        self.sq_tail = self.sq_tail.wrapping_add(1);
        Ok(())
    }

    /// Posts a receive-queue work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.cq_room() == 0 || self.rq_tail.wrapping_sub(self.rq_head) >= RQ_DEPTH as u32 {
            return Err(PostError::QueueFull);
        }
        if self.state == QpState::Error {
            self.push_cq(Completion::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0));
            return Ok(());
        }
        self.rq[(self.rq_tail as usize) % RQ_DEPTH] = wr;
        self.rq_tail = self.rq_tail.wrapping_add(1);
        Ok(())
    }

    /// Pops the oldest completion. Send-queue completions appear in posting
    /// order, receive completions in message order (MR-4.3.1).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if self.cq_len == 0 {
            return None;
        }
        let c = self.cq[(self.cq_head as usize) % CQ_DEPTH].get();
        self.cq_head = self.cq_head.wrapping_add(1);
        self.cq_len -= 1;
        Some(c)
    }

    fn push_cq(&mut self, c: Completion) {
        if (self.cq_len as usize) < CQ_DEPTH {
            let i = (self.cq_head.wrapping_add(self.cq_len) as usize) % CQ_DEPTH;
            self.cq[i] = Cqe::put(c);
            self.cq_len += 1;
        }
    }

    /// Moves the QP to the error state (verbs `modify_qp(IB_QPS_ERR)`):
    /// flushes all outstanding work (MR-7.3).
    pub fn set_error(&mut self) {
        self.enter_error(None);
    }

    /// Spec: MR-5.4.7 — the consumer takes the QP out of service (destroys
    /// it, or moves it to the error state): as [`Self::set_error`], and if
    /// data packets arrived, the ACK of the path where the latest arrived goes
    /// out once more, the last packet [`Self::poll_transmit`] gives.
    pub fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let latest = (0..MAX_PATHS)
                .filter(|&q| self.paths[q].rx_at != 0)
                .max_by_key(|&q| self.paths[q].rx_at);
            if let Some(q) = latest {
                self.last_word = Maybe::some(q as u8);
            }
        }
        self.enter_error(None);
    }

    // ------------------------------------------------------------------
    // Input
    // ------------------------------------------------------------------

    /// Handles one received datagram: `bytes` is everything after the UDP
    /// header, `src_port` its UDP source port, `ce` whether the IP ECN
    /// field was CE. Malformed or misaddressed input is counted and dropped
    /// (MR-3.1.5); nothing here can panic on any byte string (MR-3.1.6).
    pub fn handle_datagram<M: Memory>(
        &mut self,
        now: Instant,
        src_port: u16,
        ce: bool,
        bytes: &[u8],
        mem: &mut M,
    ) {
        self.handle_scattered(now, src_port, ce, bytes, &[], mem);
    }

    /// [`Self::handle_datagram`] of a datagram received in pieces: `bytes`
    /// (which must hold the headers, see [`PacketRepr::parse_scattered`]),
    /// then each of `more`. The payload is placed piece by piece, with no
    /// copy to join them.
    pub fn handle_scattered<M: Memory>(
        &mut self,
        now: Instant,
        src_port: u16,
        ce: bool,
        bytes: &[u8],
        more: &[&[u8]],
        mem: &mut M,
    ) {
        // Spec: MR-3.1.5, MR-9.4.2 — invalid input is counted and dropped
        // without any response.
        // Borrowed from the parse's result, not moved out of it: a `PacketRepr`
        // is 184 bytes, and the move was a copy of them for every datagram.
        let parsed = PacketRepr::parse_scattered(bytes, more);
        let pkt = match &parsed {
            Ok(pkt) => pkt,
            Err(_) => {
                self.stats.rx_invalid += 1;
                self.stats.rx_malformed += 1;
                return;
            }
        };
        let p = pkt.base.path_id as usize;
        // Spec: MR-9.3.1 — QPN and path checks before any state change.
        let (limit, echo_ok) = match pkt.body {
            // An ACK names one of our own send paths, and so does its echo
            // path (MR-3.5.1): the echo fields describe one of our paths.
            Body::Ack(ref a) => (self.cfg.num_paths, a.echo_path < self.cfg.num_paths),
            // So does an acknowledgement a data packet carries (MR-3.7.6).
            _ => (
                self.cfg.peer_num_paths,
                pkt.ack.is_none_or(|a| a.echo_path < self.cfg.num_paths),
            ),
        };
        if pkt.base.dest_qpn != self.cfg.local_qpn || p >= limit as usize || !echo_ok {
            self.stats.rx_invalid += 1;
            return;
        }
        if self.state == QpState::Error {
            return;
        }
        self.stats.rx_packets += 1;
        let t = now.as_nanos();
        // The ACK is borrowed, not bound by value: an `AckRepr` is large enough
        // that each copy is a `memcpy` call, which the emulated CPUs of the test
        // VMs run a byte at a time.
        match pkt.body {
            Body::Ack(ref a) => self.on_ack(t, p, a, mem),
            Body::Probe if bytes.len() >= PROBE_LEN => {
                // Spec: MR-6.4.2 — answer a probe at once on its path.
                let path = &mut self.paths[p];
                path.rx_port = src_port;
                path.probe_reply = true;
                path.probe_ts = pkt.base.timestamp;
                self.ack_wanted |= 1 << p;
            }
            Body::Probe | Body::Datagram { .. } => self.stats.rx_invalid += 1,
            Body::Request { .. } | Body::Response { .. } => {
                // Spec: MR-3.7.6 — the carried acknowledgement first, as if it
                // had arrived alone just before the packet.
                if let Some(ref a) = pkt.ack {
                    self.on_ack(t, a.echo_path as usize, a, mem);
                    if self.state == QpState::Error {
                        return;
                    }
                }
                self.on_data(t, p, src_port, ce, &pkt, mem)
            }
        }
        // Spec: MR-7.3.2 — a deferred fatal NAK, once the responses before it
        // are acknowledged (only an acknowledgement retires them); entering
        // the error state sends it.
        if !self.nak_after_responses.is_none() && self.job_head == self.job_tail && self.state == QpState::Rts {
            self.enter_error(None);
        }
    }

    fn on_data<M: Memory>(
        &mut self,
        now: u64,
        p: usize,
        src_port: u16,
        ce: bool,
        pkt: &PacketRepr<'_>,
        mem: &mut M,
    ) {
        let base = pkt.base;
        // Spec: MR-7.1.5 — a responder-only peer starts at the QPN-derived TSN;
        // adopt it with the first packet, while nothing has been accepted.
        if self.cfg.accept_derived_peer_tsn
            && base.tsn.wrapping_sub(self.rcv_nxt) >= WINDOW
            && self.rcv_nxt == self.cfg.peer_initial_tsn
            && self.rcv_bits.is_empty()
        {
            let derived = qpn_derived_tsn(self.cfg.remote_qpn, self.cfg.local_qpn, self.cfg.initial_tsn);
            if base.tsn.wrapping_sub(derived) < WINDOW {
                self.rcv_nxt = derived;
                self.cfg.peer_initial_tsn = derived;
                self.cfg.accept_derived_peer_tsn = false;
            }
        }
        // Spec: MR-5.2.1 (receive record), MR-5.2.2 and MR-4.2.2 — duplicates
        // are never placed or executed twice.
        let d = base.tsn.wrapping_sub(self.rcv_nxt);
        if d >= 0x8000_0000 && !self.received_since_start(base.tsn) {
            // Spec: MR-5.2.2 — before the first TSN expected from the peer: not
            // this connection's (a late packet of an earlier QP with the same
            // numbers, MR-7.1.5). Answered as a duplicate, its DUP report
            // widened the new requester's loss detection (MR-5.3.6) for
            // reordering there never was.
            self.stats.rx_invalid += 1;
            return;
        }
        if d >= 0x8000_0000 || (d < WINDOW && self.rcv_bits.get(base.tsn)) {
            self.stats.rx_dup += 1;
            self.note_arrival(now, p, src_port, ce, &base);
            let path = &mut self.paths[p];
            path.ack_now = true;
            path.dup = true;
            return;
        }
        if d >= WINDOW {
            // Spec: MR-5.2.4, MR-9.4.2 — beyond the window: drop silently.
            self.stats.rx_invalid += 1;
            self.stats.rx_beyond_window += 1;
            return;
        }
        if self.cfg.recovery == Recovery::GoBackN && d != 0 {
            self.note_arrival(now, p, src_port, ce, &base);
            if self.gbn_nak_at.get() != Some(self.rcv_nxt) {
                self.gbn_nak_at = Maybe::some(self.rcv_nxt);
                self.nak = Maybe::some(PendingNak {
                    syndrome: Syndrome::NakSequence,
                    msn: self.msg_cum,
                    tsn: self.rcv_nxt,
                    path: p as u8,
                });
            }
            return;
        }
        let verdict = match pkt.body {
            Body::Request {
                req,
                atomic,
                payload,
            } => self.rx_request(&base, &req, atomic, payload, mem),
            Body::Response { rsp, payload } => self.rx_response(now, &base, &rsp, payload, mem),
            _ => Verdict::Drop,
        };
        // Spec: MR-4.1.3, MR-5.2.4, MR-9.4.2 — a discarded packet leaves no
        // trace: only kept (or RNR-refused) packets touch the path's ACK state.
        if !matches!(verdict, Verdict::Drop) {
            self.note_arrival(now, p, src_port, ce, &base);
        }
        match verdict {
            Verdict::Accept => {
                if base.tsn != self.rcv_nxt {
                    self.stats.rx_out_of_order += 1;
                }
                self.rcv_bits.set(base.tsn);
                while self.rcv_bits.get(self.rcv_nxt) {
                    self.rcv_bits.clear(self.rcv_nxt);
                    self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
                }
                if self.rcv_nxt.wrapping_sub(self.cfg.peer_initial_tsn) >= 0x8000_0000 {
                    self.received_half_space = true;
                }
                let every = self.cfg.ack_every as u16;
                let delay = self.cfg.ack_delay.as_nanos();
                let path = &mut self.paths[p];
                if path.rx_unacked == 0 || seq_lt(path.rx_tsn_hi, base.tsn) {
                    path.rx_tsn_hi = base.tsn;
                }
                path.rx_unacked = path.rx_unacked.saturating_add(1);
                // Spec: MR-5.4.1 — ACK every `ack_every` packets or after `ack_delay`.
                if path.rx_unacked >= every {
                    path.ack_now = true;
                } else if path.ack_due == 0 {
                    path.ack_due = now.saturating_add(delay).max(1);
                }
            }
            Verdict::Rnr => {
                // Spec: MR-4.2.4 — no receive WQE: RNR NAK, packet not acknowledged.
                // Spec: MR-9.4.3 — at most one NAK pending.
                if self.nak.is_none() {
                    let msn = match pkt.body {
                        Body::Request { req, .. } => req.msn,
                        _ => 0,
                    };
                    self.stats.rnr_naks += 1;
                    self.nak = Maybe::some(PendingNak {
                        syndrome: Syndrome::NakRnr,
                        msn,
                        tsn: base.tsn,
                        path: p as u8,
                    });
                }
            }
            Verdict::Drop => {}
        }
        self.deliver(now, p, mem);
    }

    /// Per-path receive bookkeeping for a packet that is kept, refused with
    /// RNR, or recognised as a duplicate: ECN count, highest PSN with its
    /// timestamp, and the immediate-ACK triggers of MR-5.4.1.
    fn note_arrival(&mut self, now: u64, p: usize, src_port: u16, ce: bool, base: &BaseRepr) {
        // What arrived is acknowledged on its path (now, or by `ack_due`, which
        // the caller sets for an accepted packet).
        self.ack_wanted |= 1 << p;
        let path = &mut self.paths[p];
        path.rx_port = src_port;
        path.rx_cnt = path.rx_cnt.saturating_add(1);
        if ce {
            // Spec: MR-2.5.2, MR-8.3.1 — count and echo CE promptly.
            self.stats.rx_ce += 1;
            path.rx_ce = path.rx_ce.saturating_add(1);
            path.ack_now = true;
        }
        let psn = base.path_psn;
        if !path.rx_seen || seq_lt(path.rx_psn, psn) {
            // Spec: MR-6.2.3 — a PSN gap on a path triggers an immediate ACK.
            if path.rx_seen && psn != path.rx_psn.wrapping_add(1) {
                path.ack_now = true;
            }
            path.rx_seen = true;
            path.rx_psn = psn;
            path.rx_ts = base.timestamp;
            path.rx_at = now;
        } else {
            path.ack_now = true;
        }
        if base.flags.has(Flags::ACK_REQ) {
            if base.flags.has(Flags::RETX) {
                path.ack_now = true;
            } else {
                self.ack_promptly(now, p);
            }
        }
    }

    /// Spec: MR-5.4.1, MR-5.4.6 — the ACK of path `p` is wanted at once: now,
    /// or within `reply_wait` when a data packet of ours is likely to leave
    /// by then and can carry it.
    fn ack_promptly(&mut self, now: u64, p: usize) {
        let soon = self.sending_soon(now);
        self.ack_wanted |= 1 << (p % MAX_PATHS);
        let path = &mut self.paths[p % MAX_PATHS];
        if soon {
            let by = now.saturating_add(self.cfg.reply_wait.as_nanos()).max(1);
            path.ack_due = if path.ack_due == 0 {
                by
            } else {
                path.ack_due.min(by)
            };
        } else {
            path.ack_now = true;
        }
    }

    /// Spec: MR-5.4.6 — this side is sending too: a READ response is waiting
    /// to go, or a data packet left within the last `8 × reply_wait` (a
    /// conversation, where the peer's request is likely answered soon).
    fn sending_soon(&self, now: u64) -> bool {
        let wait = self.cfg.reply_wait.as_nanos();
        wait > 0
            && (self.job_send != self.job_tail
                || (self.last_data_tx != 0 && now.saturating_sub(self.last_data_tx) <= 8 * wait))
    }

    fn rx_request<M: Memory>(
        &mut self,
        base: &BaseRepr,
        req: &RequestRepr,
        atomic: Option<AtomicRepr>,
        payload: Payload<'_>,
        mem: &mut M,
    ) -> Verdict {
        // Spec: MR-7.3.2 — while a fatal NAK waits for the responses before
        // it, requests are discarded as in the error state.
        if !self.nak_after_responses.is_none() {
            return Verdict::Drop;
        }
        let op = base.opcode;
        // Spec: MR-4.6.2 — a UC message dropped at its turn may have been failed
        // before all its packets came: the rest still take their TSNs (kept,
        // never placed), or they would leave a hole the requester resends forever.
        let behind = self.msg_cum.wrapping_sub(req.msn).wrapping_sub(1);
        if self.cfg.uc && behind < MSG_WINDOW {
            return Verdict::Accept;
        }
        // Spec: MR-4.1.3 — the message must fall in the responder's window.
        if req.msn.wrapping_sub(self.msg_cum) >= MSG_WINDOW {
            return Verdict::Drop;
        }
        let idx = (req.msn % MSG_WINDOW) as usize;
        if !self.msgs[idx].active {
            let mut s = MsgSlot::EMPTY;
            s.active = true;
            s.op = op as u8;
            s.msn = req.msn;
            s.tsn = base.tsn;
            s.ssn = req.ssn;
            s.msg_len = req.msg_len;
            s.imm = req.imm;
            s.rkey = req.rkey;
            s.va = req.remote_va;
            s.solicited = base.flags.has(Flags::SOLICITED);
            if op.consumes_recv() {
                // Spec: MR-4.2.3 — bind the receive WQE numbered by SSN; from a
                // shared receive queue, take WQEs only now, up to this message's
                // (at most RQ_DEPTH calls).
                let k = req.ssn.wrapping_sub(self.rq_head);
                while k >= self.rq_tail.wrapping_sub(self.rq_head) {
                    if k >= RQ_DEPTH as u32 || self.cq_room() == 0 {
                        return Verdict::Rnr;
                    }
                    let Some(wr) = mem.take_shared_recv() else {
                        return Verdict::Rnr;
                    };
                    self.rq[(self.rq_tail as usize) % RQ_DEPTH] = wr;
                    self.rq_tail = self.rq_tail.wrapping_add(1);
                }
                let r = self.rq[(req.ssn as usize) % RQ_DEPTH];
                s.recv_wr = r.wr_id;
                if op != Opcode::WriteImm && req.msg_len > r.len {
                    s.err = Syndrome::NakInvalid as u8;
                    s.err_tsn = base.tsn;
                    s.recv_len_err = true;
                }
            }
            if let Some(a) = atomic {
                s.atomic = a;
            }
            if (atomic.is_some() || op == Opcode::AtomicWrite) && req.remote_va & 7 != 0 {
                // Spec: MR-4.4.5, MR-4.4.6 — a misaligned atomic or ATOMIC_WRITE
                // is an invalid request.
                s.err = Syndrome::NakInvalid as u8;
                s.err_tsn = base.tsn;
            }
            // Spec: MR-4.6.1 — nor may a UC peer send anything else.
            if req.msg_len > MAX_MSG || (self.cfg.uc && !op.allowed_on_uc()) {
                s.err = Syndrome::NakInvalid as u8;
                s.err_tsn = base.tsn;
            }
            self.msgs[idx] = s;
        } else {
            let s = &mut self.msgs[idx];
            if s.op != op as u8
                || s.msg_len != req.msg_len
                || s.ssn != req.ssn
                || s.rkey != req.rkey
                || s.va != req.remote_va
                || s.imm != req.imm
            {
                // Spec: MR-4.1.4 — packets of one message must agree. The
                // message is failed and counts as complete, so its delivery
                // turn comes and the NAK-INVALID is sent (MR-7.3.2).
                if s.err == 0 {
                    s.err = Syndrome::NakInvalid as u8;
                    s.err_tsn = base.tsn;
                }
                s.complete = true;
                return Verdict::Accept;
            }
        }
        let last = base.flags.has(Flags::LAST);
        let before = (self.msgs[idx].received, self.msgs[idx].got_last);
        let (err, received, got_last) = {
            let s = &mut self.msgs[idx];
            s.received = s.received.saturating_add(payload.len() as u32);
            s.got_last |= last;
            (s.err, s.received, s.got_last)
        };
        let complete = if op.carries_payload() {
            got_last && received == req.msg_len
        } else {
            true
        };
        // Spec: MR-3.1.3, MR-4.2.1 — each packet is placed on arrival from its
        // own headers.
        if err == 0 && op.carries_payload() && !payload.is_empty() {
            // Spec: MR-4.3.3 — the final bytes of a message are placed only
            // once the message (and every earlier one) is complete, and
            // (MR-10.1.3) every copy of its other bytes is done.
            let now_deliverable = complete && req.msn == self.msg_cum && mem.placed();
            // Spec: MR-4.4.6 — an ATOMIC_WRITE's 8 bytes are stored at its
            // delivery turn, as one unit: they always wait in the stash.
            let t = if op == Opcode::AtomicWrite || (last && !now_deliverable) {
                payload.len().min(TAIL_STASH)
            } else {
                0
            };
            let split = payload.len() - t;
            let r = place(mem, &self.msgs[idx], req.offset, payload, split);
            let s = &mut self.msgs[idx];
            match r {
                Ok(()) => {
                    if t > 0 {
                        s.tail_len = t as u8;
                        s.tail_off = req.offset.wrapping_add(split as u32);
                        if let Some(dst) = s.tail.get_mut(..t) {
                            payload.copy_to(split, dst);
                        }
                    }
                }
                // Spec: MR-9.2.5 — memory not resident: the packet is refused
                // as if lost (the message forgets it; the peer resends it).
                Err(MemError::Fault) => {
                    (s.received, s.got_last) = before;
                    self.stats.rx_faults += 1;
                    return Verdict::Drop;
                }
                Err(e) => {
                    s.err = mem_syndrome(e) as u8;
                    s.err_tsn = base.tsn;
                }
            }
        }
        // A failed message needs no more packets: it is reported at its turn.
        let s = &mut self.msgs[idx];
        s.complete = complete || s.err != 0;
        Verdict::Accept
    }

    /// Delivers complete messages in MSN order (MR-4.3.2): flushes stashed
    /// tails, generates receive completions, starts reads and runs atomics.
    fn deliver<M: Memory>(&mut self, now: u64, p: usize, mem: &mut M) {
        while self.state == QpState::Rts && self.nak_after_responses.is_none() {
            let idx = (self.msg_cum % MSG_WINDOW) as usize;
            // Read in place: a copy of the 144-byte slot is a `memcpy` call (see
            // `handle_scattered`), paid by every message.
            let s = &self.msgs[idx];
            if !s.active || !s.complete || s.msn != self.msg_cum {
                return;
            }
            // Spec: MR-10.1.3 — delivery (the tail, a completion, a READ or
            // atomic, an invalidation) waits for every earlier copy.
            if !mem.placed() {
                self.delivery_stalled = Maybe::some(p as u8);
                return;
            }
            let op = Opcode::from_u8(s.op).unwrap_or(Opcode::Send);
            let answered = op == Opcode::ReadReq || op.is_atomic();
            let mut err = Syndrome::from_u8(s.err).filter(|e| e.is_fatal());
            // Spec: MR-4.2.3 — the message with SSN s uses the s-th receive WQE,
            // and receive completions come in SSN order, so at its turn a message
            // that consumes one must hold the next. A peer that numbered otherwise
            // (or a forged packet) would have two messages complete one WQE and
            // another WQE never complete: an invalid request instead.
            let ssn_out_of_turn = op.consumes_recv() && s.ssn != self.rq_head;
            if ssn_out_of_turn && err.is_none() {
                err = Some(Syndrome::NakInvalid);
            }
            if err.is_none() && s.tail_len > 0 {
                let tail = s.tail.get(..s.tail_len as usize).unwrap_or(&[]);
                let r = match (op, <&[u8; 8]>::try_from(tail)) {
                    // Spec: MR-4.4.6 — stored at the delivery turn, as one unit.
                    (Opcode::AtomicWrite, Ok(bytes)) => mem.atomic_write_remote(s.rkey, s.va, bytes),
                    (Opcode::AtomicWrite, Err(_)) => Err(MemError::Operation),
                    _ => place(mem, s, s.tail_off, tail.into(), tail.len()),
                };
                if r == Err(MemError::Fault) {
                    return self.delivery_faulted(p);
                }
                if let Err(e) = r {
                    err = Some(mem_syndrome(e));
                }
            }
            if err.is_none() {
                match op {
                    // Spec: MR-4.4.1 — READs and atomics execute at their delivery turn.
                    Opcode::ReadReq | Opcode::AtomicCas | Opcode::AtomicFaa => {
                        if self.job_tail.wrapping_sub(self.job_head) >= RESP_JOBS as u32 {
                            // Spec: MR-4.4.2 — out of responder resources:
                            // stall delivery until a job retires.
                            return;
                        }
                        let mut j = Job::EMPTY;
                        j.msn = s.msn;
                        j.req_tsn = s.tsn;
                        j.rkey = s.rkey;
                        j.va = s.va;
                        j.len = s.msg_len;
                        j.req_path = p as u8;
                        if op != Opcode::ReadReq {
                            // Spec: MR-5.6.1 — execute the atomic exactly once,
                            // keep the result in the replay cache.
                            let aop = if op == Opcode::AtomicCas {
                                AtomicOp::Cas {
                                    compare: s.atomic.compare,
                                    swap: s.atomic.swap_add,
                                }
                            } else {
                                AtomicOp::Faa {
                                    add: s.atomic.swap_add,
                                }
                            };
                            match mem.atomic_remote(s.rkey, s.va, aop) {
                                Ok(v) => {
                                    j.atomic = true;
                                    j.orig = v;
                                    j.len = 8;
                                }
                                Err(MemError::Fault) => return self.delivery_faulted(p),
                                Err(e) => err = Some(mem_syndrome(e)),
                            }
                        }
                        if err.is_none() {
                            self.jobs[(self.job_tail as usize) % RESP_JOBS] = j;
                            self.job_tail = self.job_tail.wrapping_add(1);
                        }
                    }
                    Opcode::SendInv if mem.invalidate(s.imm).is_err() => {
                        err = Some(Syndrome::NakRemoteOp);
                    }
                    // Spec: MR-4.4.7 — a FLUSH executes at its delivery turn, after
                    // every earlier message has been placed.
                    Opcode::Flush => {
                        let what = Flush::from_bits(s.imm).unwrap_or_default();
                        if let Err(e) = mem.flush_remote(s.rkey, s.va, s.msg_len, what) {
                            err = Some(mem_syndrome(e));
                        }
                    }
                    _ => {}
                }
            }
            if err.is_some() && self.cfg.uc && !op.consumes_recv() {
                // Spec: MR-4.6.2 — a UC message that uses no receive WQE and
                // cannot be carried out is dropped at its turn: it retires below
                // and is acknowledged like any other, no NAK, both QPs stay up.
                self.stats.uc_dropped += 1;
                err = None;
            }
            if let Some(e) = err {
                // Spec: MR-7.3.2 — fatal NAK at the message's turn, then error.
                // Spec: MR-3.5.3 — NAK TSN names a packet of the message.
                let tsn = if s.err != 0 { s.err_tsn } else { s.tsn };
                let nak = PendingNak {
                    syndrome: e,
                    msn: s.msn,
                    tsn,
                    path: p as u8,
                };
                if s.recv_len_err && !ssn_out_of_turn {
                    self.push_cq(Completion::new(s.recv_wr, WcStatus::LocLenErr, WcOpcode::Recv, 0));
                    self.rq_head = self.rq_head.wrapping_add(1);
                }
                // Spec: MR-7.3.2 — the responses to earlier READs and atomics
                // go first (they were executed, and the requester completes
                // them only with their data), acknowledged before the NAK;
                // entering the error state sends it.
                self.nak_after_responses = Maybe::some(nak);
                if self.job_head == self.job_tail {
                    self.enter_error(None);
                }
                return;
            }
            if op.consumes_recv() {
                let (opcode, imm, inv) = match op {
                    Opcode::SendImm => (WcOpcode::Recv, Some(s.imm), None),
                    Opcode::SendInv => (WcOpcode::Recv, None, Some(s.imm)),
                    Opcode::WriteImm => (WcOpcode::RecvRdmaWithImm, Some(s.imm), None),
                    _ => (WcOpcode::Recv, None, None),
                };
                self.push_cq(Completion {
                    wr_id: s.recv_wr,
                    status: WcStatus::Success,
                    opcode,
                    byte_len: s.msg_len,
                    imm,
                    invalidated_rkey: inv,
                    solicited: s.solicited,
                });
                self.rq_head = self.rq_head.wrapping_add(1);
            }
            self.msgs[idx].active = false;
            self.msg_cum = self.msg_cum.wrapping_add(1);
            // Spec: MR-5.4.1 — report delivery progress promptly; MR-5.4.6 —
            // by the reply, if one is about to leave. A READ or atomic request
            // is reported by its response (MR-5.2.5), and by the ordinary ACKs.
            if !answered {
                self.ack_promptly(now, p);
            }
        }
    }

    /// Spec: MR-9.2.5 — delivery stops at the current message, whose memory is
    /// not resident, until [`Self::resume_delivery`]; `p` is the path whose ACK
    /// reports the progress then.
    fn delivery_faulted(&mut self, p: usize) {
        self.stats.delivery_faults += 1;
        self.delivery_stalled = Maybe::some(p as u8);
    }

    /// Spec: MR-9.2.5 — resumes delivery stopped by memory that was not
    /// resident; the caller has brought it in (or tries again). Spec:
    /// MR-10.1.3 — likewise delivery held for copies not yet done
    /// ([`Responder::placed`]). Does nothing unless delivery stopped so.
    pub fn resume_delivery<M: Memory>(&mut self, now: Instant, mem: &mut M) {
        if let Some(p) = self.delivery_stalled.take() {
            self.deliver(now.as_nanos(), p as usize, mem);
        }
    }

    fn rx_response<M: Memory>(
        &mut self,
        now: u64,
        base: &BaseRepr,
        rsp: &ResponseRepr,
        payload: Payload<'_>,
        mem: &mut M,
    ) -> Verdict {
        let m = rsp.req_msn;
        // Spec: MR-4.4.4 — a response must match an outstanding request.
        if m.wrapping_sub(self.sq_head) >= self.sq_send.wrapping_sub(self.sq_head) {
            return Verdict::Drop;
        }
        let i = (m as usize) % SQ_DEPTH;
        let e = self.sq[i];
        let ok = match (base.opcode, e.wr.opcode) {
            (Opcode::ReadResp, WrOpcode::Read) => rsp.msg_len == e.wr.len,
            (Opcode::AtomicResp, WrOpcode::AtomicCas | WrOpcode::AtomicFaa) => true,
            _ => false,
        };
        if !ok || e.resp_done {
            return Verdict::Drop;
        }
        let r = if base.opcode == Opcode::AtomicResp {
            let mut b = [0u8; 8];
            payload.copy_to(0, &mut b);
            mem.write_local(e.wr.wr_id, 0, &u64::from_be_bytes(b).to_ne_bytes())
        } else {
            // Spec: MR-4.2.1 — each piece at its own offset, as it arrived.
            payload.for_each_in(0, payload.len(), |off, piece| {
                mem.write_local(e.wr.wr_id, rsp.offset.wrapping_add(off as u32), piece)
            })
        };
        if r == Err(MemError::Fault) {
            // Spec: MR-9.2.5 — refused as if lost; the responder resends it.
            self.stats.rx_faults += 1;
            return Verdict::Drop;
        }
        if r.is_err() {
            self.enter_error(Some((m, WcStatus::LocProtErr)));
            return Verdict::Drop;
        }
        self.ack_answered_request(now, m);
        let e = &mut self.sq[i];
        e.resp_bytes = e.resp_bytes.saturating_add(payload.len() as u32);
        e.resp_last |= base.flags.has(Flags::LAST);
        let need = if base.opcode == Opcode::AtomicResp {
            8
        } else {
            e.wr.len
        };
        if e.resp_last && e.resp_bytes == need {
            e.resp_done = true;
            self.rd_outstanding = self.rd_outstanding.saturating_sub(1);
            self.retire();
        }
        Verdict::Accept
    }

    /// Spec: MR-5.2.5 — a response packet of message `m` acknowledges m's
    /// request packet (a READ or atomic request is one packet), which is sent
    /// without `ACK_REQ` and so is otherwise acknowledged only by the
    /// responder's delayed ACKs.
    ///
    /// It settles that packet and nothing else: no RTT sample, and no loss
    /// evidence for other packets (MR-5.3.2). The response may have waited
    /// behind others at the responder, so its arrival says nothing about when
    /// packets sent before the request should have arrived.
    fn ack_answered_request(&mut self, now: u64, m: u32) {
        let e = self.sq[(m as usize) % SQ_DEPTH];
        if e.pkts_acked == e.pkts_total {
            return;
        }
        let t = e.req_tsn;
        let i = (t % WINDOW) as usize;
        let k = self.pkts[i];
        if k.kind != K_REQ
            || k.msn != m
            || seq_lt(t, self.snd_una)
            || !seq_lt(t, self.snd_nxt)
            || !self.unacked.get(t)
        {
            return;
        }
        self.settle_pkt(t);
        self.release_acked_head();
        self.note_progress(now);
    }

    /// Frees the acknowledged packets at the head of the send window.
    fn release_acked_head(&mut self) {
        while self.snd_una != self.snd_nxt
            && self.pkts[(self.snd_una % WINDOW) as usize].state == S_ACKED
        {
            self.pkts[(self.snd_una % WINDOW) as usize].kind = K_FREE;
            self.snd_una = self.snd_una.wrapping_add(1);
        }
    }

    /// New data was acknowledged: the connection RTO, its retries and backoff,
    /// and the tail loss probe start over (MR-5.5.3, MR-5.3.4).
    fn note_progress(&mut self, now: u64) {
        self.last_progress = now;
        self.retries = 0;
        self.rto_backoff = 0;
        self.tlp_done = false;
    }

    /// `p` is the path the ACK arrived on (its MRH path id); the echo
    /// fields (RTT sample, echo PSN, ECN counts, probe answer) describe the
    /// path named by `EchoPth` (MR-3.5.1, MR-8.2.1), which `handle_datagram`
    /// has checked is one of our send paths.
    fn on_ack<M: Memory>(&mut self, now: u64, p: usize, a: &AckRepr, mem: &mut M) {
        // Spec: MR-5.2.3, MR-9.3.1 — an ACK whose cumulative TSN is beyond what
        // was sent is not from this connection's peer as it is now: a packet of an
        // earlier QP that had the same number (QP numbers are reused, and the
        // same QPN pair derives the same TSNs, MR-7.1.5), a peer that has not yet
        // adopted our derived TSN, or a forgery. Ignored whole: taken as
        // acknowledging everything sent, it released packets the peer never got,
        // which the peer then waited for while refusing the later ones as beyond
        // its window, until the connection failed.
        // Likewise one whose cumulative TSN is before the first TSN this
        // connection sent: a late ACK or NAK of an earlier QP whose TSNs lay
        // behind ours would otherwise be taken as an old one of ours, and its
        // delivery report or fatal NAK acted on (the NAK failed the new QP).
        if seq_lt(self.snd_nxt, a.cum_tsn) || !self.sent_since_start(a.cum_tsn) {
            self.stats.rx_invalid += 1;
            self.stats.rx_acks_beyond_sent += 1;
            return;
        }
        // Spec: MR-3.5.1 — ACK state is per path; the echo path names it.
        let e = (a.echo_path as usize) % MAX_PATHS;
        self.last_ack = now;
        self.report_wait_unanswered = false;
        let syn = a.syndrome.unwrap_or(Syndrome::Ack);
        // RTT sample from the echoed timestamp (MR-5.5.1); the base RTT takes one
        // per echoed packet (ACKs sent as older packets arrive late echo the same,
        // newest, one again).
        let fresh = a.rcv_count > 0 || a.flags & ACK_FLAG_PROBE != 0;
        // Spec: MR-9.3.1 — an echoed PSN this path never sent (a late ACK of an
        // earlier QP, or a forgery) is no evidence: taken as the highest PSN
        // acknowledged, it made every later packet of the path overtaken, and
        // lost a fraction of an RTT after it left.
        let echo_sent = seq_lt(a.echo_psn, self.paths[e].psn_next);
        let echo_is_new = {
            let path = &self.paths[e];
            echo_sent && (!path.has_rtt || seq_lt(path.rtt_echo_psn, a.echo_psn))
        };
        // Spec: MR-5.5.1 — an echo older than this connection's first packet
        // is not of ours: a late packet of an earlier QP with the same numbers,
        // answered by the new peer, echoes the earlier QP's timestamp, and
        // taken as the first sample it set the path's srtt to the time between
        // the two QPs.
        let rtt = if fresh {
            let r = (now as u32)
                .wrapping_sub(a.echo_ts)
                .wrapping_sub(a.ack_delay);
            let ours = self.first_tx != NEVER && u64::from(r) <= now.saturating_sub(self.first_tx);
            if r < 1_000_000_000 && ours {
                Some(r.max(1))
            } else {
                None
            }
        } else {
            None
        };
        if let Some(r) = rtt {
            let path = &mut self.paths[e];
            if !path.has_rtt {
                path.has_rtt = true;
                path.srtt = r;
                path.rttvar = r / 2;
                // A new route (or the first sample) starts a new estimate.
                path.base_rtt = BaseRtt::new(r);
            } else {
                let err = path.srtt.abs_diff(r);
                path.rttvar = path.rttvar - path.rttvar / 4 + err / 4;
                path.srtt = path.srtt - path.srtt / 8 + r / 8;
                // The base RTT takes one sample per echoed packet; later ACKs
                // repeating the echo still say how the ACK path is doing now.
                if echo_is_new {
                    path.base_rtt.sample(r);
                }
            }
            if echo_is_new {
                path.rtt_echo_psn = a.echo_psn;
            }
        }
        if a.flags & ACK_FLAG_DUP != 0 {
            self.note_duplicate(now);
        }
        if a.flags & ACK_FLAG_MOVE != 0 {
            self.move_on_request(now, e);
        }
        if fresh {
            // Spec: MR-6.3.3 — a path that delivers is healthy again.
            let path = &mut self.paths[e];
            if path.status != PathStatus::Active {
                path.status = PathStatus::Active;
                path.probe_pending = false;
                path.probe_deadline = 0;
            }
            // Spec: MR-5.5.4 — a probe of an active path, answered.
            if a.flags & ACK_FLAG_PROBE != 0 {
                path.probe_deadline = 0;
            }
            path.timeouts = 0;
            path.backoff = 0;
            if self.cfg.recovery == Recovery::Selective
                && echo_sent
                && (!path.has_acked_psn || seq_lt(path.acked_psn, a.echo_psn))
                && a.rcv_count > 0
            {
                path.acked_psn = a.echo_psn;
                path.has_acked_psn = true;
            }
            self.refresh_timed(e);
        }
        // Cumulative and selective acknowledgement (MR-5.2.3); the cumulative
        // TSN is at most `snd_nxt` (checked above).
        let mut progress = false;
        let cum = a.cum_tsn;
        while seq_lt(self.snd_una, cum) {
            let t = self.snd_una;
            progress |= self.ack_pkt(now, t, e);
            self.snd_una = t.wrapping_add(1);
            self.pkts[(t % WINDOW) as usize].kind = K_FREE;
        }
        let base = a.cum_tsn.wrapping_add(1);
        let abs = Bits256(a.sack).rotate_up(base % WINDOW);
        let cand = abs.and(&self.unacked);
        for j in cand.ones() {
            let t = self
                .snd_una
                .wrapping_add(j.wrapping_sub(self.snd_una % WINDOW) % WINDOW);
            if t.wrapping_sub(base) < WINDOW && seq_lt(t, self.snd_nxt) {
                progress |= self.ack_pkt(now, t, e);
            }
        }
        self.release_acked_head();
        if progress {
            self.note_progress(now);
        }
        // Per-path loss detection (MR-5.3.2, MR-5.3.3), on the paths with
        // packets in flight (the others have nothing to declare lost).
        for q in 0..self.cfg.num_paths as usize {
            if self.paths[q].head != NIL {
                self.detect_losses(now, q);
            }
        }
        // Congestion control (MR-8.2.1), per path.
        let total: u32 = self.paths[..self.cfg.num_paths as usize]
            .iter()
            .filter(|x| x.status == PathStatus::Active)
            .fold(0u32, |s, x| s.saturating_add(x.cc.cwnd));
        let min_cwnd = self.cfg.mtu;
        for q in 0..self.cfg.num_paths as usize {
            let path = &mut self.paths[q];
            let is_echo = q == e;
            if path.acked_bytes == 0 && !is_echo {
                continue;
            }
            let sig = AckSignal {
                acked_bytes: path.acked_bytes,
                rtt_ns: if is_echo { rtt } else { None },
                srtt_ns: path.srtt,
                base_rtt_ns: path.base_rtt.get(),
                ce: if is_echo { a.ce_count } else { 0 },
                rcvd: if is_echo { a.rcv_count } else { 0 },
                total_cwnd: total.max(min_cwnd),
            };
            if sig.acked_bytes > 0 || sig.ce > 0 || sig.rtt_ns.is_some() {
                path.cc.on_ack(&self.cfg.cc, now, &sig, min_cwnd);
            }
            path.acked_bytes = 0;
        }
        if rtt.is_some() && self.cfg.repath_congested && self.cfg.recovery == Recovery::Selective {
            self.score_and_repath(now, e);
        }
        // Spec: MR-8.4.2 — the receiver's credit hint caps the connection window.
        self.peer_credit = if a.credit_hint == 0xFFFF {
            u32::MAX
        } else {
            (a.credit_hint as u32 * 256).max(self.cfg.mtu)
        };
        // Spec: MR-3.5.3 — the MSN field reports in-order delivery.
        let msn_ok = a.msn.wrapping_sub(self.peer_msn) <= self.sq_send.wrapping_sub(self.peer_msn);
        if msn_ok && (syn == Syndrome::Ack || syn.is_fatal()) && seq_lt(self.peer_msn, a.msn) {
            self.peer_msn = a.msn;
        }
        match syn {
            Syndrome::Ack => {}
            Syndrome::NakSequence if self.cfg.recovery == Recovery::GoBackN => {
                // Go-back-N (comparison profile only; MR-3.5.5): resend
                // everything from the hole. O(window), once per NAK.
                let mut t = a.nak_tsn;
                while seq_lt(t, self.snd_nxt) {
                    if !seq_lt(t, self.snd_una) {
                        self.mark_lost(t);
                    }
                    t = t.wrapping_add(1);
                }
            }
            Syndrome::NakSequence => {}
            Syndrome::NakRnr => {
                // Spec: MR-4.2.5 — the responder answered: an RNR NAK is no
                // transport timeout. It restarts the connection RTO and clears
                // the transport retries (`retry_cnt` counts unanswered
                // requests; RNR refusals count against `rnr_retry` only).
                self.last_progress = now;
                self.retries = 0;
                self.rto_backoff = 0;
                // Spec: MR-4.2.5 — wait the RNR timer, then resend the message.
                if now >= self.rnr_until {
                    if self.cfg.rnr_retry != 7 && self.rnr_retries >= self.cfg.rnr_retry {
                        self.enter_error(Some((a.msn, WcStatus::RnrRetryExcErr)));
                        return;
                    }
                    self.rnr_retries = self.rnr_retries.saturating_add(1);
                    self.rnr_until = now.saturating_add(rnr_timer_ns(a.rnr_timer));
                    // Rare event: walk the window for the message's packets.
                    let mut t = self.snd_una;
                    while seq_lt(t, self.snd_nxt) {
                        let k = self.pkts[(t % WINDOW) as usize];
                        if k.kind == K_REQ && k.state == S_INFLIGHT && !seq_lt(k.msn, a.msn) {
                            self.mark_lost(t);
                        }
                        t = t.wrapping_add(1);
                    }
                }
            }
            Syndrome::NakAccess | Syndrome::NakInvalid | Syndrome::NakRemoteOp => {
                let st = match syn {
                    Syndrome::NakAccess => WcStatus::RemAccessErr,
                    Syndrome::NakInvalid => WcStatus::RemInvReqErr,
                    _ => WcStatus::RemOpErr,
                };
                self.retire();
                if seq_lt(a.msn, self.sq_head) {
                    // Spec: MR-5.6.5 — the message completed: a stale NAK of a
                    // rebuilt READ_RESP. Discard it and acknowledge at once, so
                    // that the responder stops resending what was received.
                    self.stats.rx_stale_naks += 1;
                    self.paths[p % MAX_PATHS].ack_now = true;
                    self.ack_wanted |= 1 << (p % MAX_PATHS);
                    self.deliver(now, p, mem);
                    return;
                }
                self.enter_error(Some((a.msn, st)));
                return;
            }
        }
        if progress {
            self.rnr_retries = 0;
        }
        self.retire();
        self.deliver(now, p, mem);
    }

    /// Spec: MR-6.3.1, MR-6.3.4 — path scoring and repathing away from a
    /// persistently congested path while other paths are healthy. A path is
    /// *hot* when its ECN fraction exceeds 1/2, or when both its smoothed RTT
    /// exceeds the best path's base RTT by more than `target_qdelay` and
    /// its window is below a quarter of the other paths' mean window; it is
    /// repathed after
    /// staying hot for 16 of its RTTs, at most once per 64 RTTs. O(paths).
    fn score_and_repath(&mut self, now: u64, p: usize) {
        let n = self.cfg.num_paths as usize;
        let target = self.cfg.cc.target_qdelay_ns as u64;
        // The three fields, not a copy of the whole path (a `memcpy` call,
        // which the emulated CPUs of the test VMs run a byte at a time).
        let (alpha, srtt, cwnd) = {
            let me = &self.paths[p];
            (me.cc.alpha, me.srtt, me.cc.cwnd)
        };
        // A long route is not a congested one: the delay and window tests
        // must agree (RTT above the best path's by more than the target *and*
        // a window far below the others'), or ECN must be heavy. Each scan
        // of the paths is made only when the tests before it leave the answer
        // open (on every ACK of a healthy path, the first says no).
        let hot = alpha > 32_768 || {
            let best = self.paths[..n]
                .iter()
                .filter(|x| x.status == PathStatus::Active && x.has_rtt)
                .map(|x| x.base_rtt.get() as u64)
                .min()
                .unwrap_or(0)
                .max(1);
            (srtt as u64) > best + target && {
                // Mean window of the other active paths: a path whose window is
                // far below it sits on a congested route (its delay/ECN history).
                let (sum, cnt) = self.paths[..n]
                    .iter()
                    .enumerate()
                    .filter(|(q, x)| *q != p && x.status == PathStatus::Active)
                    .fold((0u64, 0u64), |(s, c), (_, x)| (s + x.cc.cwnd as u64, c + 1));
                let mean_others = sum.checked_div(cnt).unwrap_or(0);
                (cwnd as u64) * 4 < mean_others
            }
        };
        let others_ok = hot && self.paths[..n].iter().enumerate().any(|(q, x)| {
            q != p
                && x.status == PathStatus::Active
                && x.has_rtt
                && x.cc.alpha <= 16_384
                && x.cc.cwnd >= cwnd.saturating_mul(2)
        });
        let path = &mut self.paths[p];
        if !(hot && others_ok) {
            path.hot_since = 0;
            return;
        }
        let srtt = (path.srtt as u64).max(1);
        if path.hot_since == 0 {
            path.hot_since = now;
        } else if now.saturating_sub(path.hot_since) >= 16 * srtt && path.may_repath(now) {
            self.new_route(now, p);
            self.stats.congestion_repaths += 1;
        }
    }

    /// Spec: MR-6.3.4, MR-6.3.5 — gives active path `q` a new source port: its
    /// RTT and ECN state restart.
    fn new_route(&mut self, now: u64, q: usize) {
        let path = &mut self.paths[q];
        path.generation = path.generation.wrapping_add(1);
        path.has_rtt = false;
        path.cc.alpha = 0;
        path.hot_since = 0;
        path.last_repath = now;
        self.stats.repaths += 1;
    }

    /// Spec: MR-6.3.5 — the receiver asks for path `q` to move: repath it if it
    /// is active and was not repathed within its last 64 RTTs.
    fn move_on_request(&mut self, now: u64, q: usize) {
        let Some(path) = self.paths[..self.cfg.num_paths as usize].get(q) else {
            return;
        };
        if path.status == PathStatus::Active && path.may_repath(now) {
            self.new_route(now, q);
            self.stats.moved_paths += 1;
        }
    }

    /// Spec: MR-6.3.5 — the receiver asks its peer to move the path with id `q`
    /// (the peer's path numbering) to a new source port, on that path's next ACK.
    /// Ignored for a path no data arrived on.
    pub fn ask_to_move(&mut self, q: usize) {
        if let Some(p) = self.paths.get_mut(q).filter(|p| p.rx_seen) {
            p.move_asked = true;
        }
    }

    /// Spec: MR-5.2.3 — whether `cum` (not beyond `snd_nxt`) can be a cumulative
    /// TSN of this connection's peer: no further behind `snd_nxt` than the first
    /// TSN this connection sent, or, once half the TSN space has been sent, than
    /// half the space (where sequence comparisons end).
    fn sent_since_start(&mut self, cum: u32) -> bool {
        let sent = self.snd_nxt.wrapping_sub(self.cfg.initial_tsn);
        if sent >= 0x8000_0000 {
            self.sent_half_space = true;
        }
        let back = self.snd_nxt.wrapping_sub(cum);
        back <= if self.sent_half_space { 0x7fff_ffff } else { sent }
    }

    /// Spec: MR-5.2.2 — whether `tsn` (behind `rcv_nxt`) can be a duplicate of
    /// this connection's: no further behind `rcv_nxt` than the first TSN it
    /// expected from its peer, or, once half the TSN space has been received,
    /// than half the space.
    fn received_since_start(&self, tsn: u32) -> bool {
        let back = self.rcv_nxt.wrapping_sub(tsn);
        self.received_half_space || back <= self.rcv_nxt.wrapping_sub(self.cfg.peer_initial_tsn)
    }

    /// Marks one in-flight TSN acknowledged by an ACK echoing path `echo`;
    /// returns true if it was new.
    fn ack_pkt(&mut self, now: u64, t: u32, echo: usize) -> bool {
        let i = (t % WINDOW) as usize;
        let k = self.pkts[i];
        if k.kind == K_FREE || k.state == S_ACKED {
            return false;
        }
        if k.state == S_INFLIGHT {
            self.rack_sent = self.rack_sent.max(k.sent);
            let path = &mut self.paths[(k.path as usize) % MAX_PATHS];
            path.lost_unseen = 0;
            path.overtaken_since = 0;
            if (!path.has_acked_psn || seq_lt(path.acked_psn, k.psn))
                && self.cfg.recovery == Recovery::Selective
            {
                path.acked_psn = k.psn;
                path.has_acked_psn = true;
            }
            // Spec: MR-5.3.4 — the probe's copy, sent later on another path,
            // was acknowledged while the ACK does not come from the original's
            // path: the original was overtaken there (MR-5.3.3's run). Without
            // this, probes that rescue a black-holed path's packets one at a
            // time faster than its path RTO keep it from ever timing out.
            let from = k.rescued_from as usize;
            if k.rescued_from != NO_PATH && from != echo && from < self.cfg.num_paths as usize {
                self.count_overtaken_loss(now, from, k.sent);
            }
        }
        self.settle_pkt(t);
        true
    }

    /// Marks TSN `t` (in flight or lost, not yet acknowledged) acknowledged:
    /// off its path and its path's window, out of the retransmission queue,
    /// counted for its message.
    fn settle_pkt(&mut self, t: u32) {
        let i = (t % WINDOW) as usize;
        let k = self.pkts[i];
        if k.state == S_INFLIGHT {
            self.unlink(t);
            let path = &mut self.paths[(k.path as usize) % MAX_PATHS];
            path.inflight = path.inflight.saturating_sub(k.len as u32);
            path.acked_bytes = path.acked_bytes.saturating_add(k.len as u32);
        }
        self.pkts[i].state = S_ACKED;
        self.lost.clear(t);
        self.unacked.clear(t);
        if k.kind == K_REQ {
            let e = &mut self.sq[(k.msn as usize) % SQ_DEPTH];
            e.pkts_acked = e.pkts_acked.saturating_add(1);
        } else {
            let j = &mut self.jobs[(k.slot as usize) % RESP_JOBS];
            j.pkts_acked = j.pkts_acked.saturating_add(1);
        }
    }

    /// Spec: MR-5.3.6 — a duplicate reported by the peer means a packet declared
    /// lost was only overtaken: widen the reordering window by a quarter srtt (at
    /// most once per round trip, up to [`REO_MULT_MAX`]).
    fn note_duplicate(&mut self, now: u64) {
        if self.reo_mult == 0 || now >= self.reo_grown_at.saturating_add(self.max_srtt()) {
            self.reo_mult = (self.reo_mult + 1).min(REO_MULT_MAX);
            self.reo_grown_at = now;
            self.reo_losses = 0;
        }
    }

    /// Spec: MR-5.3.6 — after [`REO_QUIET_LOSSES`] losses declared since the
    /// reordering window last grew, narrow it by a quarter.
    fn count_loss_for_reordering(&mut self) {
        if self.reo_mult == 0 {
            return;
        }
        self.reo_losses = self.reo_losses.saturating_add(1);
        if self.reo_losses >= REO_QUIET_LOSSES {
            self.reo_mult -= 1;
            self.reo_losses = 0;
        }
    }

    /// Spec: MR-5.3.3 — how long after it was sent an overtaken packet of path
    /// `q` is declared lost: srtt + reo (5/4 srtt until reordering is seen, up to
    /// 2 srtt, MR-5.3.6) when a later packet of the same path was
    /// acknowledged; at least srtt + 4 rttvar, plus the reordering allowance
    /// (srtt / 4 per step of the multiplier), when only other paths' were, whose
    /// acknowledgements say nothing about this path's delay. Shared by loss
    /// detection and the timer that triggers it.
    fn rack_window(&self, q: usize, overtaken_on_path: bool) -> u64 {
        let p = &self.paths[q];
        // Spec: MR-5.3.6 — reordering seen widens it, up to 2 srtt.
        let quarters = self.reo_mult.clamp(1, REO_MULT_MAX) as u64;
        let same_path = p.srtt as u64 + p.srtt as u64 / 4 * quarters;
        if overtaken_on_path {
            same_path
        } else {
            // Spec: MR-5.3.6 — seen reordering widens this one too.
            let allowance = p.srtt as u64 / 4 * self.reo_mult as u64;
            (p.srtt as u64 + 4 * p.rttvar as u64 + allowance).max(same_path)
        }
    }

    /// Spec: MR-5.3.2 (per-path SACK gap) and MR-5.3.3 (time-based).
    fn detect_losses(&mut self, now: u64, q: usize) {
        if self.cfg.recovery != Recovery::Selective {
            return;
        }
        loop {
            let path = &self.paths[q];
            if path.head == NIL {
                return;
            }
            let k = self.pkts[path.head as usize];
            let ahead = if path.has_acked_psn {
                path.acked_psn.wrapping_sub(k.psn) as i32
            } else {
                0
            };
            // A later packet of this path was acknowledged, or (once this path has an
            // RTT) one sent later on any path: with one or two packets in a path's
            // window, the packet lost is often the last one in flight on its path.
            if ahead <= 0 && !(path.has_rtt && self.rack_sent > k.sent) {
                return;
            }
            let reo = self.rack_window(q, ahead > 0);
            // Spec: MR-5.3.2 — the PSN gap alone counts only while no reordering
            // has been seen (MR-5.3.6); then the time rule decides.
            let gap = ahead > 0 && ahead as u32 >= DUPTHRESH && self.reo_mult == 0;
            if gap || now >= k.sent.saturating_add(reo) {
                let t = self.tsn_of(path.head);
                self.stats.lost_detected += 1;
                self.count_loss_for_reordering();
                if ahead <= 0 && self.count_overtaken_loss(now, q, k.sent) {
                    return;
                }
                self.mark_lost(t);
            } else {
                return;
            }
        }
    }

    /// Spec: MR-5.3.3 — one more packet of path `q` lost to overtaking by
    /// other paths' packets; returns true if that run timed the path out.
    ///
    /// A path whose packets keep being overtaken by other paths' and none of
    /// its own is acknowledged has failed (a black hole): treat it as a path
    /// timeout (MR-6.3.2). While reordering is being seen (MR-5.3.6) it takes
    /// a longer run: a path that is only slower now and then is overtaken as
    /// well.
    ///
    /// `sent`: when that packet was sent (for an original rescued by a probe,
    /// when its copy was: later, so the path's clock is not moved earlier).
    fn count_overtaken_loss(&mut self, now: u64, q: usize, sent: u64) -> bool {
        let needed = 3 * (1 + self.reo_mult);
        let p = &mut self.paths[q];
        p.lost_unseen = p.lost_unseen.saturating_add(1);
        // A new run, or one whose clock a path timeout or an idle spell cleared.
        if p.lost_unseen == 1 || p.overtaken_since == 0 {
            p.overtaken_since = sent.max(1);
        }
        if p.lost_unseen < needed {
            return false;
        }
        p.lost_unseen = 0;
        self.stats.path_timeouts_overtaken += 1;
        self.path_timeout(now, q);
        true
    }

    fn tsn_of(&self, idx: u16) -> u32 {
        let j = idx as u32;
        self.snd_una
            .wrapping_add(j.wrapping_sub(self.snd_una % WINDOW) % WINDOW)
    }

    /// Moves an in-flight packet to the retransmission queue.
    fn mark_lost(&mut self, t: u32) {
        let i = (t % WINDOW) as usize;
        let k = self.pkts[i];
        if k.kind == K_FREE || k.state != S_INFLIGHT {
            return;
        }
        self.unlink(t);
        let path = &mut self.paths[(k.path as usize) % MAX_PATHS];
        path.inflight = path.inflight.saturating_sub(k.len as u32);
        self.pkts[i].state = S_LOST;
        self.lost.set(t);
    }

    fn unlink(&mut self, t: u32) {
        let i = (t % WINDOW) as usize;
        let k = self.pkts[i];
        let q = (k.path as usize) % MAX_PATHS;
        if k.prev == NIL {
            self.paths[q].head = k.next;
            self.refresh_timed(q);
        } else {
            self.pkts[k.prev as usize].next = k.next;
        }
        if k.next == NIL {
            self.paths[q].tail = k.prev;
        } else {
            self.pkts[k.next as usize].prev = k.prev;
        }
        self.pkts[i].prev = NIL;
        self.pkts[i].next = NIL;
    }

    /// Brings path `q`'s bit of `timed_paths` up to date.
    fn refresh_timed(&mut self, q: usize) {
        let q = q % MAX_PATHS;
        if self.paths[q].has_deadline() {
            self.timed_paths |= 1 << q;
        } else {
            self.timed_paths &= !(1 << q);
        }
    }

    fn link(&mut self, t: u32, q: usize) {
        let i = (t % WINDOW) as u16;
        let tail = self.paths[q].tail;
        self.pkts[i as usize].prev = tail;
        self.pkts[i as usize].next = NIL;
        if tail == NIL {
            self.paths[q].head = i;
            self.timed_paths |= 1 << q;
        } else {
            self.pkts[tail as usize].next = i;
        }
        self.paths[q].tail = i;
    }

    /// Retires completed send WRs in posting order (MR-4.3.1) and frees
    /// acknowledged responder jobs.
    fn retire(&mut self) {
        while self.msg_una != self.sq_send
            && self.sq[(self.msg_una as usize) % SQ_DEPTH].transport_done()
        {
            self.msg_una = self.msg_una.wrapping_add(1);
        }
        while self.sq_head != self.sq_send {
            let e = self.sq[(self.sq_head as usize) % SQ_DEPTH];
            if !e.done(self.sq_head, self.peer_msn) {
                break;
            }
            // Spec: MR-7.4.2 — unsignaled WRs complete silently on success.
            if e.wr.flags & WR_SIGNALED != 0 {
                self.push_cq(Completion::new(e.wr.wr_id, WcStatus::Success, WcOpcode::of(e.wr.opcode), e.wr.len));
            }
            self.sq_head = self.sq_head.wrapping_add(1);
        }
        while self.job_head != self.job_send {
            let j = self.jobs[(self.job_head as usize) % RESP_JOBS];
            if !(j.fully_sent && j.pkts_acked == j.pkts_total) {
                break;
            }
            self.job_head = self.job_head.wrapping_add(1);
        }
    }

    fn enter_error(&mut self, first: Option<(u32, WcStatus)>) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        // Spec: MR-7.3.2 — a failure found at delivery is reported, whatever
        // ended the wait for the earlier responses.
        if let Some(nak) = self.nak_after_responses.take() {
            self.nak = Maybe::some(nak);
        }
        // Spec: MR-7.3.3 — complete in order; the failing WR carries the
        // error, the rest are flushed.
        let mut k = self.sq_head;
        while k != self.sq_tail {
            let e = self.sq[(k as usize) % SQ_DEPTH];
            let status = match first {
                Some((m, st)) if m == k => st,
                _ if e.done(k, self.peer_msn) => WcStatus::Success,
                _ => WcStatus::WrFlushErr,
            };
            if status != WcStatus::Success || e.wr.flags & WR_SIGNALED != 0 {
                let byte_len = if status == WcStatus::Success { e.wr.len } else { 0 };
                self.push_cq(Completion::new(e.wr.wr_id, status, WcOpcode::of(e.wr.opcode), byte_len));
            }
            k = k.wrapping_add(1);
        }
        self.sq_head = self.sq_tail;
        self.sq_send = self.sq_tail;
        self.msg_una = self.sq_tail;
        while self.rq_head != self.rq_tail {
            let r = self.rq[(self.rq_head as usize) % RQ_DEPTH];
            self.push_cq(Completion::new(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0));
            self.rq_head = self.rq_head.wrapping_add(1);
        }
        self.pkts.fill(Pkt::EMPTY);
        self.unacked = Bits256::new();
        self.snd_una = self.snd_nxt;
        self.lost = Bits256::new();
        self.job_head = self.job_tail;
        self.job_send = self.job_tail;
        for path in self.paths.iter_mut() {
            path.head = NIL;
            path.tail = NIL;
            path.inflight = 0;
            path.probe_pending = false;
            path.ack_now = false;
            path.ack_due = 0;
            path.probe_reply = false;
        }
        for q in 0..MAX_PATHS {
            self.refresh_timed(q);
        }
    }

    // ------------------------------------------------------------------
    // Timers (MR-5.3, MR-5.5, MR-6.4)
    // ------------------------------------------------------------------

    /// Spec: MR-5.3.5 — when path `q`'s RTO started, given that its oldest
    /// in-flight packet was sent at `head_sent`: then, or when the first packet
    /// of its current run of losses to overtaking was sent, if that run has two
    /// packets or more (they leave the path's list but say nothing arrived).
    fn path_clock(&self, q: usize, head_sent: u64) -> u64 {
        let p = &self.paths[q];
        if p.lost_unseen >= 2 && p.overtaken_since != 0 {
            p.overtaken_since.min(head_sent)
        } else {
            head_sent
        }
    }

    /// Spec: MR-5.3.5, MR-5.5.2 — when path `q` times out, if it has a packet
    /// in flight (`poll_timeout` and `handle_timeout` must agree on it).
    fn path_deadline(&self, q: usize) -> Option<u64> {
        let head = self.paths[q].head;
        (head != NIL).then(|| {
            self.path_clock(q, self.pkts[head as usize].sent)
                .saturating_add(self.path_rto(q))
        })
    }

    /// Spec: MR-5.5.2.
    fn path_rto(&self, q: usize) -> u64 {
        let p = &self.paths[q];
        let mut base = (p.srtt as u64 + 4 * p.rttvar as u64)
            .max(2 * p.srtt as u64)
            .saturating_add(self.cfg.ack_delay.as_nanos())
            .max(self.cfg.min_path_rto.as_nanos());
        if !p.has_rtt {
            // No sample on this route yet (new or repathed): be conservative,
            // it may be much longer than the others.
            let others = self.paths[..self.cfg.num_paths as usize]
                .iter()
                .filter(|x| x.has_rtt)
                .map(|x| x.srtt as u64)
                .max()
                .unwrap_or(0);
            base = base
                .max(4 * self.cfg.initial_rtt.as_nanos())
                .max(3 * others);
        }
        (base << p.backoff.min(10)).min(self.cfg.max_rto.as_nanos())
    }

    /// The largest smoothed RTT of the connection's paths (ns).
    fn max_srtt(&self) -> u64 {
        self.paths[..self.cfg.num_paths as usize]
            .iter()
            .map(|p| p.srtt as u64)
            .max()
            .unwrap_or(0)
    }

    /// Spec: MR-5.5.4 — nothing is in flight, yet sent work is incomplete: its
    /// packets are acknowledged, and it waits for the responder's report of its
    /// delivery (MR-4.3.1) or for a response the responder keeps in flight.
    fn awaiting_report(&self) -> bool {
        !self.in_flight() && self.sq_head != self.sq_send && self.state != QpState::Error
    }

    /// Spec: MR-5.5.4 — a connection RTO passed with nothing in flight and sent
    /// work incomplete: the ACK that reported its delivery may have been lost (a
    /// delivery that lagged its packets' acknowledgement is reported once).
    /// Probe an active path: the answer is an ACK, which carries the delivery
    /// point. The wait backs off like the RTO; it counts a retry only when no
    /// ACK came since the previous wait ended (a peer that answers is there and
    /// may just be slow; one that does not may be gone, and the work must then
    /// fail as MR-5.5.3's would, not wait for ever).
    fn ask_for_report(&mut self, now: u64) {
        if self.report_wait_unanswered {
            if self.retries >= self.cfg.retry_cnt {
                let oldest = self.sq_head;
                self.enter_error(Some((oldest, WcStatus::RetryExcErr)));
                return;
            }
            self.retries += 1;
        }
        let n = self.cfg.num_paths as usize;
        if let Some(q) = (0..n).find(|&q| {
            let p = &self.paths[q];
            p.status == PathStatus::Active && !p.probe_pending && p.probe_deadline == 0
        }) {
            self.paths[q].probe_pending = true;
        }
        // Also when no path is free to probe: the probes already out (a failed
        // path's, MR-6.4.3) ask the peer as well, and an ACK answering any of
        // them clears this. Set only with a probe of its own, a requester whose
        // every path had failed never counted a retry: it probed a peer in the
        // error state for ever, the READ it waited for never completing.
        self.report_wait_unanswered = true;
        self.last_progress = now;
        self.rto_backoff = self.rto_backoff.saturating_add(1);
    }

    /// Spec: MR-5.5.4 — when a requester waiting for a delivery report probes
    /// (None: it is not waiting, or an RNR timer runs, MR-4.2.5).
    fn report_deadline(&self) -> Option<u64> {
        (self.awaiting_report() && self.rnr_until == 0)
            .then(|| self.last_progress.saturating_add(self.conn_rto()))
    }

    /// Spec: MR-5.5.3.
    fn conn_rto(&self) -> u64 {
        self.conn_rto_at(self.max_srtt())
    }

    /// [`Self::conn_rto`] given the connection's largest srtt (one scan of the
    /// paths serves both this and the tail-loss probe's timeout).
    fn conn_rto_at(&self, max_srtt: u64) -> u64 {
        let base = (3 * max_srtt).max(self.cfg.min_rto.as_nanos());
        (base << self.rto_backoff.min(16)).min(self.cfg.max_rto.as_nanos())
    }

    fn tlp_timeout(&self) -> u64 {
        self.tlp_timeout_at(self.max_srtt())
    }

    fn tlp_timeout_at(&self, max_srtt: u64) -> u64 {
        2 * max_srtt + self.cfg.ack_delay.as_nanos()
    }

    /// Packets are sent and not yet acknowledged: an acknowledgement, or else a
    /// timer, will follow.
    pub fn in_flight(&self) -> bool {
        self.snd_una != self.snd_nxt
    }

    /// The earliest time at which [`Self::handle_timeout`] must be called,
    /// if any. O(paths).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state == QpState::Error {
            return None;
        }
        let mut t = u64::MAX;
        let sel = self.cfg.recovery == Recovery::Selective;
        for q in paths_in(self.ack_wanted) {
            let p = &self.paths[q];
            if p.ack_due != 0 {
                t = t.min(p.ack_due);
            }
        }
        for q in paths_in(self.timed_paths) {
            if q >= self.cfg.num_paths as usize {
                break;
            }
            let p = &self.paths[q];
            if p.probe_deadline != 0 {
                t = t.min(p.probe_deadline);
            }
            if p.status == PathStatus::Failed && !p.probe_pending && p.probe_deadline == 0 {
                t = t.min(p.probe_at);
            }
            if sel && p.head != NIL {
                let k = &self.pkts[p.head as usize];
                if let Some(deadline) = self.path_deadline(q) {
                    t = t.min(deadline);
                }
                let on_path = p.has_acked_psn && seq_lt(k.psn, p.acked_psn);
                if on_path || (p.has_rtt && self.rack_sent > k.sent) {
                    t = t.min(k.sent.saturating_add(self.rack_window(q, on_path)));
                }
            }
        }
        // Spec: MR-4.2.5 — no connection RTO or tail probe while waiting out an
        // RNR timer (the RTO restarts when the wait ends).
        // Spec: MR-5.5.4 — nor the wait for a delivery report.
        if let Some(d) = self.report_deadline() {
            t = t.min(d);
        }
        if self.in_flight() && self.rnr_until == 0 {
            let srtt = self.max_srtt();
            t = t.min(self.last_progress.saturating_add(self.conn_rto_at(srtt)));
            if sel && !self.tlp_done {
                t = t.min(
                    self.last_ack
                        .max(self.last_progress)
                        .saturating_add(self.tlp_timeout_at(srtt)),
                );
            }
        }
        if self.rnr_until != 0 {
            t = t.min(self.rnr_until);
        }
        if t == u64::MAX {
            None
        } else {
            Some(Instant(t))
        }
    }

    /// Runs the timers that have expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == QpState::Error {
            return;
        }
        let now = now.as_nanos();
        if self.rnr_until != 0 && now >= self.rnr_until {
            // Spec: MR-4.2.5 — the wait is over: the resend starts a fresh RTO.
            self.rnr_until = 0;
            self.last_progress = now;
        }
        let sel = self.cfg.recovery == Recovery::Selective;
        for q in paths_in(self.ack_wanted) {
            let p = &mut self.paths[q];
            if p.ack_due != 0 && now >= p.ack_due {
                p.ack_now = true;
            }
        }
        for q in 0..self.cfg.num_paths as usize {
            if sel {
                self.detect_losses(now, q);
                if self.path_deadline(q).is_some_and(|deadline| now >= deadline) {
                    self.path_timeout(now, q);
                }
            }
            let p = &mut self.paths[q];
            if p.probe_deadline != 0 && now >= p.probe_deadline {
                // Spec: MR-6.4.3 — unanswered probe: (re)fail and repath.
                p.probe_deadline = 0;
                p.timeouts = p.timeouts.saturating_add(1);
                if p.timeouts >= 2 {
                    p.status = PathStatus::Failed;
                    p.generation = p.generation.wrapping_add(1);
                    p.has_rtt = false;
                    p.has_acked_psn = false;
                    p.backoff = p.backoff.saturating_add(1).min(8);
                    self.stats.repaths += 1;
                }
                let wait =
                    (p.srtt as u64 * 2).max(self.cfg.min_path_rto.as_nanos()) << p.backoff.min(8);
                p.probe_at = now.saturating_add(wait);
                if p.status == PathStatus::Suspect {
                    p.probe_pending = true;
                }
            }
            if p.status == PathStatus::Failed
                && !p.probe_pending
                && p.probe_deadline == 0
                && now >= p.probe_at
            {
                p.probe_pending = true;
            }
            self.refresh_timed(q);
        }
        if self.report_deadline().is_some_and(|d| now >= d) {
            self.ask_for_report(now);
        }
        if self.in_flight() && self.rnr_until == 0 {
            if now >= self.last_progress.saturating_add(self.conn_rto()) {
                self.conn_timeout(now);
            } else if sel
                && !self.tlp_done
                && now
                    >= self
                        .last_ack
                        .max(self.last_progress)
                        .saturating_add(self.tlp_timeout())
            {
                // Spec: MR-5.3.4 — tail loss probe.
                self.tlp_pending = true;
                self.tlp_done = true;
            }
        }
    }

    /// Spec: MR-5.3.5, MR-6.3.2 — a path timed out: move its packets elsewhere,
    /// collapse its window, stop using it and probe it.
    fn path_timeout(&mut self, now: u64, q: usize) {
        self.stats.path_timeouts += 1;
        self.paths[q].overtaken_since = 0;
        while self.paths[q].head != NIL {
            let t = self.tsn_of(self.paths[q].head);
            self.mark_lost(t);
        }
        let min = self.cfg.mtu;
        let p = &mut self.paths[q];
        p.cc.on_timeout(min, now);
        p.timeouts = p.timeouts.saturating_add(1);
        if p.timeouts >= 2 {
            p.status = PathStatus::Failed;
            p.generation = p.generation.wrapping_add(1);
            p.has_rtt = false;
            p.has_acked_psn = false;
            self.stats.repaths += 1;
        } else {
            p.status = PathStatus::Suspect;
        }
        p.probe_pending = true;
        self.refresh_timed(q);
    }

    /// Spec: MR-5.5.3 — nothing acknowledged on any path for an RTO.
    fn conn_timeout(&mut self, now: u64) {
        self.stats.rto += 1;
        if self.retries >= self.cfg.retry_cnt {
            let m = self.msg_una;
            self.enter_error(Some((m, WcStatus::RetryExcErr)));
            return;
        }
        self.retries += 1;
        self.rto_backoff = self.rto_backoff.saturating_add(1);
        self.last_progress = now;
        let min = self.cfg.mtu;
        for q in 0..self.cfg.num_paths as usize {
            while self.paths[q].head != NIL {
                let t = self.tsn_of(self.paths[q].head);
                self.mark_lost(t);
            }
            self.paths[q].cc.on_timeout(min, now);
        }
    }

    // ------------------------------------------------------------------
    // Output
    // ------------------------------------------------------------------

    /// UDP source port of path `q` (MR-6.1.1): repathing changes it; always
    /// in the dynamic range (MR-2.3.2).
    fn path_port(&self, q: usize) -> u16 {
        let g = self.paths[q].generation as u32;
        let stride = 2 * self.cfg.num_paths as u32 + 1;
        let v = (self.cfg.src_port_base as u32)
            .wrapping_add(q as u32)
            .wrapping_add(g.wrapping_mul(stride));
        0xC000 | (v & 0x3FFF) as u16
    }

    fn total_inflight(&self) -> u32 {
        self.paths
            .iter()
            .fold(0u32, |s, p| s.saturating_add(p.inflight))
    }

    /// Spec: MR-6.2.2 — choose a path for a data packet of `len` bytes.
    fn pick_path(&mut self, len: u32, avoid: Option<usize>) -> Option<usize> {
        // Spec: MR-8.1.2, MR-8.4.2 — the credit hint caps the connection.
        let total = self.total_inflight();
        if total > 0 && total.saturating_add(len) > self.peer_credit {
            return None;
        }
        let n = self.cfg.num_paths as usize;
        // Spec: MR-6.3.1 — healthy paths first; never deadlock.
        for class in [PathStatus::Active, PathStatus::Suspect, PathStatus::Failed] {
            if !self.paths[..n].iter().any(|p| p.status == class) {
                continue;
            }
            for pass in 0..2 {
                for k in 0..n {
                    let q = (self.rr as usize + k) % n;
                    let p = &self.paths[q];
                    if p.status != class || (pass == 0 && Some(q) == avoid) {
                        continue;
                    }
                    // Spec: MR-8.1.1 — per-path window.
                    if p.inflight == 0 || p.inflight.saturating_add(len) <= p.cc.cwnd {
                        self.rr = ((q + 1) % n) as u8;
                        return Some(q);
                    }
                }
            }
            return None;
        }
        None
    }

    /// Writes the next packet to send into `buf` (which must hold
    /// [`Self::max_packet_len`] bytes) and returns its description, or
    /// `None` when nothing may be sent now. Priority: NAK, ACKs, probes,
    /// retransmissions, responses, new requests (MR-5.4.3).
    pub fn poll_transmit<M: Memory>(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        mem: &mut M,
    ) -> Option<Transmit> {
        if buf.len() < self.max_packet_len() {
            return None;
        }
        let sent = self.next_transmit(now, buf, mem);
        if sent.is_some() && self.first_tx == NEVER {
            self.first_tx = now.as_nanos();
        }
        sent
    }

    /// [`Self::poll_transmit`]'s packet, once the buffer is known to hold any.
    fn next_transmit<M: Memory>(&mut self, now: Instant, buf: &mut [u8], mem: &mut M) -> Option<Transmit> {
        let t = now.as_nanos();
        if let Some(n) = self.nak.take() {
            return self.emit_ack(t, n.path as usize, Some(n), buf);
        }
        if self.state == QpState::Error {
            // Spec: MR-5.4.7 — nothing after the last word.
            let q = self.last_word.take()?;
            return self.emit_ack(t, q as usize, None, buf);
        }
        // Lowest path first, as a scan of every path would find them.
        for q in paths_in(self.ack_wanted) {
            let p = &self.paths[q];
            if p.ack_now || p.probe_reply || (p.ack_due != 0 && t >= p.ack_due) {
                return self.emit_ack(t, q, None, buf);
            }
            if p.ack_due == 0 {
                self.ack_wanted &= !(1 << q);
            }
        }
        for q in 0..self.cfg.num_paths as usize {
            if self.paths[q].probe_pending {
                return self.emit_probe(t, q, buf);
            }
        }
        if self.rnr_until != 0 && t < self.rnr_until {
            return None;
        }
        if self.tlp_pending {
            self.tlp_pending = false;
            // Newest in-flight packet, resent on another path.
            let mut k = self.snd_nxt;
            while k != self.snd_una {
                k = k.wrapping_sub(1);
                if self.pkts[(k % WINDOW) as usize].state == S_INFLIGHT {
                    let from = self.pkts[(k % WINDOW) as usize].path as usize;
                    let len = self.pkts[(k % WINDOW) as usize].len as u32;
                    if let Some(q) = self.pick_path(len, Some(from)) {
                        self.unlink(k);
                        let old = &mut self.paths[from % MAX_PATHS];
                        old.inflight = old.inflight.saturating_sub(len);
                        self.stats.tlp += 1;
                        let tx = self.send_pkt(t, k, q, true, buf, mem);
                        self.pkts[(k % WINDOW) as usize].rescued_from = from as u8;
                        return tx;
                    }
                    break;
                }
            }
        }
        // Spec: MR-5.4.2 — lost packets go first, oldest TSN first (it holds
        // back the window and message completion); O(4 words).
        while !self.lost.is_empty() {
            let Some(j) = self.lost.rotate_down(self.snd_una % WINDOW).ones().next() else { break };
            let k = self.snd_una.wrapping_add(j);
            let i = (k % WINDOW) as usize;
            if self.pkts[i].state != S_LOST || !seq_lt(k, self.snd_nxt) {
                self.lost.clear(k);
                continue;
            }
            // Retransmit on a different path when possible.
            let q = self.pick_path(self.pkts[i].len as u32, Some(self.pkts[i].path as usize))?;
            self.lost.clear(k);
            return self.send_pkt(t, k, q, true, buf, mem);
        }
        // Spec: MR-5.1.3 — at most 256 TSNs in flight.
        if self.snd_nxt.wrapping_sub(self.snd_una) >= WINDOW {
            return None;
        }
        // Responses before new requests.
        if self.job_send != self.job_tail {
            let ji = (self.job_send as usize) % RESP_JOBS;
            let j = self.jobs[ji];
            let len = if j.atomic {
                8
            } else {
                (j.len - j.next_off).min(self.cfg.mtu)
            };
            let q = self.pick_path(len, None)?;
            let tsn = self.snd_nxt;
            let mut k = Pkt::EMPTY;
            k.kind = K_RESP;
            k.slot = ji as u8;
            k.msn = j.msn;
            k.offset = j.next_off;
            k.len = len as u16;
            self.new_pkt(tsn, k);
            let jm = &mut self.jobs[ji];
            jm.next_off += if j.atomic { 0 } else { len };
            jm.pkts_total += 1;
            if j.atomic || jm.next_off >= j.len {
                jm.fully_sent = true;
                self.job_send = self.job_send.wrapping_add(1);
            }
            return self.send_pkt(t, tsn, q, false, buf, mem);
        }
        // New request packets.
        if self.sq_send == self.sq_tail {
            return None;
        }
        let si = (self.sq_send as usize) % SQ_DEPTH;
        let e = self.sq[si];
        if !e.started {
            // Spec: MR-4.4.3 — fence waits for earlier reads and atomics.
            if e.wr.flags & WR_FENCE != 0 && self.rd_outstanding > 0 {
                return None;
            }
            if e.wr.opcode.has_response() && self.rd_outstanding >= self.cfg.max_rd_atomic as u32 {
                return None;
            }
            // Spec: MR-4.1.2 — message window.
            if self.sq_send.wrapping_sub(self.msg_una) >= MSG_WINDOW {
                return None;
            }
        }
        // Spec: MR-4.1.1, MR-2.6.2 — full-MTU packets, remainder last.
        let len = if e.wr.opcode.wire().carries_payload() {
            (e.wr.len - e.next_off).min(self.cfg.mtu)
        } else {
            0
        };
        let q = self.pick_path(len, None)?;
        if !e.started && e.wr.opcode.has_response() {
            self.rd_outstanding += 1;
        }
        let tsn = self.snd_nxt;
        let mut k = Pkt::EMPTY;
        k.kind = K_REQ;
        k.msn = self.sq_send;
        k.offset = e.next_off;
        k.len = len as u16;
        self.new_pkt(tsn, k);
        let em = &mut self.sq[si];
        if !em.started {
            em.req_tsn = tsn;
        }
        em.started = true;
        em.next_off += len;
        em.pkts_total += 1;
        if len == 0 || em.next_off >= e.wr.len {
            em.fully_sent = true;
            self.sq_send = self.sq_send.wrapping_add(1);
        }
        self.send_pkt(t, tsn, q, false, buf, mem)
    }

    fn new_pkt(&mut self, tsn: u32, k: Pkt) {
        self.pkts[(tsn % WINDOW) as usize] = k;
        self.unacked.set(tsn);
        if !self.in_flight() {
            // Restart the RTO clock when the window becomes non-empty.
            self.last_progress = 0;
        }
        self.snd_nxt = tsn.wrapping_add(1);
    }

    /// Emits data packet `tsn` on path `q` and links it there.
    fn send_pkt<M: Memory>(
        &mut self,
        now: u64,
        tsn: u32,
        q: usize,
        retx: bool,
        buf: &mut [u8],
        mem: &mut M,
    ) -> Option<Transmit> {
        if self.last_progress == 0 || !self.in_flight() {
            self.last_progress = now;
        }
        let i = (tsn % WINDOW) as usize;
        // Spec: MR-5.1.2, MR-6.2.1 — every transmission takes the path's next
        // PSN; MR-5.1.1 — the TSN and headers are those of the original.
        // Spec: MR-5.3.1 — remember path, PSN and send time, in PSN order.
        let psn = self.paths[q].psn_next;
        self.paths[q].psn_next = psn.wrapping_add(1);
        // Spec: MR-5.3.5 — a run of losses to overtaking on a path that then sat
        // idle past its RTO (so it never timed out) does not time the path out
        // the moment it is used again: the run's next loss restarts its clock
        // (`count_overtaken_loss`); its length still counts (MR-5.3.3).
        let since = self.paths[q].overtaken_since;
        if self.paths[q].head == NIL && since != 0 && now >= since.saturating_add(self.path_rto(q)) {
            self.paths[q].overtaken_since = 0;
        }
        {
            let k = &mut self.pkts[i];
            k.path = q as u8;
            k.psn = psn;
            k.sent = now;
            k.state = S_INFLIGHT;
            k.rescued_from = NO_PATH;
            if retx {
                k.retx = k.retx.saturating_add(1);
            }
        }
        self.link(tsn, q);
        let k = self.pkts[i];
        self.paths[q].inflight = self.paths[q].inflight.saturating_add(k.len as u32);
        let mut flags = Flags(0).with(Flags::RETX, retx).with(Flags::ACK_REQ, retx);
        let len = k.len as usize;
        let hl;
        let piggybacked: Option<usize>;
        let payload_res: Result<(), MemError>;
        if k.kind == K_REQ {
            let e = self.sq[(k.msn as usize) % SQ_DEPTH];
            let op = e.wr.opcode.wire();
            let last = !op.carries_payload() || k.offset + k.len as u32 >= e.wr.len;
            // Spec: MR-5.4.5 — ACK_REQ on the last packet and on retransmissions,
            // but not on a READ or atomic request's first transmission: its
            // response acknowledges it (MR-5.2.5).
            let answered = e.wr.opcode.has_response();
            flags = flags
                .with(Flags::LAST, last)
                .with(Flags::ACK_REQ, retx || (last && !answered))
                .with(Flags::SOLICITED, e.wr.flags & WR_SOLICITED != 0)
                .with(Flags::FENCE, e.wr.flags & WR_FENCE != 0);
            let req = RequestRepr {
                msn: k.msn,
                ssn: e.ssn,
                offset: k.offset,
                msg_len: e.wr.len,
                imm: match e.wr.opcode {
                    WrOpcode::SendImm | WrOpcode::SendInv | WrOpcode::WriteImm | WrOpcode::Flush => e.wr.imm,
                    _ => 0,
                },
                rkey: e.wr.rkey,
                remote_va: e.wr.remote_va,
            };
            let atomic = if op.is_atomic() {
                Some(AtomicRepr {
                    swap_add: e.wr.swap_add,
                    compare: e.wr.compare,
                })
            } else {
                None
            };
            let mut repr = PacketRepr {
                base: self.base(op, flags, q, psn, tsn, now),
                body: Body::Request {
                    req,
                    atomic,
                    payload: Payload::EMPTY,
                },
                ack: None,
            };
            piggybacked = self.piggyback(now, &mut repr, len, buf.len());
            hl = repr.emit_headers(buf).ok()?;
            payload_res = if len > 0 {
                match buf.get_mut(hl..hl + len) {
                    Some(dst) => mem.read_local(e.wr.wr_id, k.offset, dst),
                    None => Err(MemError::Access),
                }
            } else {
                Ok(())
            };
            if payload_res == Err(MemError::Fault) {
                return self.tx_faulted(tsn);
            }
            if payload_res.is_err() {
                // Spec: MR-7.3.5 — local gather failure: LocProtErr, QP error.
                self.enter_error(Some((k.msn, WcStatus::LocProtErr)));
                return None;
            }
        } else {
            let j = self.jobs[(k.slot as usize) % RESP_JOBS];
            let op = if j.atomic {
                Opcode::AtomicResp
            } else {
                Opcode::ReadResp
            };
            let last = j.atomic || k.offset + k.len as u32 >= j.len;
            flags = flags
                .with(Flags::LAST, last)
                .with(Flags::ACK_REQ, retx || last);
            let mut repr = PacketRepr {
                base: self.base(op, flags, q, psn, tsn, now),
                body: Body::Response {
                    rsp: ResponseRepr {
                        req_msn: j.msn,
                        offset: k.offset,
                        msg_len: j.len,
                    },
                    payload: Payload::EMPTY,
                },
                ack: None,
            };
            piggybacked = self.piggyback(now, &mut repr, len, buf.len());
            hl = repr.emit_headers(buf).ok()?;
            let dst = buf.get_mut(hl..hl + len)?;
            payload_res = if j.atomic {
                // Spec: MR-5.6.2 — (re)transmissions come from the replay cache.
                dst.copy_from_slice(&j.orig.to_be_bytes());
                Ok(())
            } else if len == 0 {
                Ok(())
            } else {
                // Spec: MR-5.6.4 — READ data is re-read for every transmission.
                match j.va.checked_add(k.offset as u64) {
                    Some(va) => mem.read_remote(j.rkey, va, dst),
                    None => Err(MemError::Access),
                }
            };
            if payload_res == Err(MemError::Fault) {
                return self.tx_faulted(tsn);
            }
            if let Err(e) = payload_res {
                // Spec: MR-3.5.3 — the NAK names the READ request's packet;
                // MR-3.2.6 — and one of the requester's paths (not `q`, ours:
                // a requester with fewer paths would drop it as invalid and
                // wait for the response for ever).
                let nak = PendingNak {
                    syndrome: mem_syndrome(e),
                    msn: j.msn,
                    tsn: j.req_tsn,
                    path: j.req_path,
                };
                if retx {
                    // Spec: MR-5.6.5 — the first transmission read the memory:
                    // most likely the requester completed the READ (its ACKs
                    // lost) and has since invalidated the R_Key. NAK and stay
                    // up; the packet stays in flight until acknowledged, and a
                    // requester still waiting for it fails the READ. A NAK the
                    // receive side has pending (RNR, MR-9.4.3) stays pending.
                    self.stats.stale_read_naks += 1;
                    return self.emit_ack(now, nak.path as usize, Some(nak), buf);
                }
                self.nak = Maybe::some(nak);
                self.enter_error(None);
                let n = self.nak.take()?;
                return self.emit_ack(now, n.path as usize, Some(n), buf);
            }
        }
        self.stats.tx_packets += 1;
        if retx {
            self.stats.tx_retx += 1;
        } else {
            self.stats.tx_data += 1;
        }
        if let Some(qa) = piggybacked {
            self.ack_sent(qa, false);
            self.stats.tx_piggybacked += 1;
        }
        self.last_data_tx = now;
        // Spec: MR-2.5.1 — data is ECN-capable.
        Some(Transmit {
            len: hl + len,
            path: q as u8,
            src_port: self.path_port(q),
            ecn: Ecn::Ect0,
            ack: false,
        })
    }

    /// Spec: MR-9.2.5 — the payload of packet `tsn` is not resident: the
    /// packet, which has taken its PSN and path, counts as lost and goes
    /// first once anything runs the connection again (nothing leaves now).
    fn tx_faulted(&mut self, tsn: u32) -> Option<Transmit> {
        self.stats.tx_faults += 1;
        self.mark_lost(tsn);
        None
    }

    fn base(&self, op: Opcode, flags: Flags, q: usize, psn: u32, tsn: u32, now: u64) -> BaseRepr {
        BaseRepr {
            opcode: op,
            flags,
            path_id: q as u8,
            dest_qpn: self.cfg.remote_qpn,
            path_psn: psn,
            tsn,
            timestamp: now as u32,
        }
    }

    /// Spec: MR-5.4.6 — puts a pending acknowledgement into data packet `repr`
    /// (of `payload` bytes) when the packet still fits the MTU and `room`;
    /// returns the path it acknowledges, whose ACK state the caller clears
    /// once the packet is built.
    fn piggyback(
        &self,
        now: u64,
        repr: &mut PacketRepr<'_>,
        payload: usize,
        room: usize,
    ) -> Option<usize> {
        let q = self.piggyback_path()?;
        let len = repr.header_len() + ACK_EXT_LEN + payload;
        if len > room || len > self.max_packet_len() {
            return None;
        }
        repr.ack = Some(self.ack_repr(now, q, None).0);
        Some(q)
    }

    /// Spec: MR-6.4.1, MR-6.4.4 — a probe takes no TSN and no window.
    fn emit_probe(&mut self, now: u64, q: usize, buf: &mut [u8]) -> Option<Transmit> {
        let deadline = now.saturating_add(self.path_rto(q));
        let p = &mut self.paths[q];
        p.probe_pending = false;
        p.probe_deadline = deadline;
        self.refresh_timed(q);
        let repr = PacketRepr {
            base: self.base(Opcode::Probe, Flags(0), q, 0, 0, now),
            body: Body::Probe,
            ack: None,
        };
        repr.emit(buf).ok()?;
        // Spec: MR-9.3.3 — pad so the reply is never larger than the probe.
        let len = PROBE_LEN;
        buf.get_mut(BaseRepr::LEN..len)?.fill(0);
        self.stats.tx_packets += 1;
        self.stats.tx_probes += 1;
        Some(Transmit {
            len,
            path: q as u8,
            src_port: self.path_port(q),
            ecn: Ecn::Ect0,
            ack: false,
        })
    }

    /// The ACK (or NAK) for packets received on path `q` (MR-3.5.1), and
    /// whether it answers a probe.
    fn ack_repr(&self, now: u64, q: usize, nak: Option<PendingNak>) -> (AckRepr, bool) {
        let q = q % MAX_PATHS;
        let sack = self
            .rcv_bits
            .rotate_down(self.rcv_nxt.wrapping_add(1) % WINDOW)
            .truncate(WINDOW - 1);
        let p = &self.paths[q];
        let probe = p.probe_reply && nak.is_none();
        let mut flags = 0;
        if p.rx_ce > 0 {
            flags |= ACK_FLAG_ECE;
        }
        if probe {
            flags |= ACK_FLAG_PROBE;
        }
        if p.dup {
            flags |= ACK_FLAG_DUP;
        }
        if p.move_asked {
            flags |= ACK_FLAG_MOVE;
        }
        let (echo_ts, delay) = if probe {
            (p.probe_ts, 0)
        } else {
            (
                p.rx_ts,
                now.saturating_sub(p.rx_at).min(u32::MAX as u64) as u32,
            )
        };
        let ack = AckRepr {
            cum_tsn: self.rcv_nxt,
            syndrome: Some(nak.map(|n| n.syndrome).unwrap_or(Syndrome::Ack)),
            rnr_timer: if nak.map(|n| n.syndrome) == Some(Syndrome::NakRnr) {
                self.cfg.min_rnr_timer
            } else {
                0
            },
            echo_path: q as u8,
            flags,
            msn: nak.map(|n| n.msn).unwrap_or(self.msg_cum),
            nak_tsn: nak.map(|n| n.tsn).unwrap_or(0),
            echo_psn: p.rx_psn,
            echo_ts,
            ack_delay: delay,
            ce_count: p.rx_ce,
            rcv_count: if probe { 0 } else { p.rx_cnt },
            credit_hint: self.credit_hint,
            sack: sack.0,
        };
        (ack, probe)
    }

    /// Path `q`'s acknowledgement state once an ACK for it has left.
    fn ack_sent(&mut self, q: usize, probe: bool) {
        let p = &mut self.paths[q % MAX_PATHS];
        p.rx_ce = 0;
        p.rx_cnt = 0;
        p.rx_unacked = 0;
        p.ack_due = 0;
        p.ack_now = false;
        p.dup = false;
        p.move_asked = false;
        if probe {
            p.probe_reply = false;
        }
        // Spec: MR-5.4.1 — the ACK's cumulative TSN acknowledges the packets of
        // every path below it: a path whose ACK was only delayed (nothing that
        // asks for one at once) and whose packets it all covers needs none of
        // its own. Its CE and received counts carry over to its next ACK. With
        // a message's packets spread over the paths, this is one ACK per message
        // instead of one per packet.
        let cum = self.rcv_nxt;
        for r in self.paths.iter_mut() {
            if r.ack_due != 0
                && !r.ack_now
                && !r.dup
                && !r.probe_reply
                && r.rx_unacked > 0
                && seq_lt(r.rx_tsn_hi, cum)
            {
                r.ack_due = 0;
                r.rx_unacked = 0;
            }
        }
    }

    /// Spec: MR-5.4.6 — a path whose acknowledgement is pending and may ride
    /// on a data packet (not a probe answer: that goes alone, on its path).
    fn piggyback_path(&self) -> Option<usize> {
        paths_in(self.ack_wanted).find(|&q| {
            let p = &self.paths[q];
            (p.ack_now || p.ack_due != 0) && !p.probe_reply
        })
    }

    /// Emits an ACK (or NAK) for packets received on path `q` (MR-3.5.1):
    /// PSN and TSN are zero in the MRH (MR-3.2.7).
    fn emit_ack(
        &mut self,
        now: u64,
        q: usize,
        nak: Option<PendingNak>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let q = q % MAX_PATHS;
        let (ack, probe) = self.ack_repr(now, q, nak);
        let p = &self.paths[q];
        let port = if p.rx_port != 0 {
            p.rx_port
        } else {
            self.path_port(q)
        };
        let repr = PacketRepr {
            base: self.base(Opcode::Ack, Flags(0), q, 0, 0, now),
            body: Body::Ack(ack),
            ack: None,
        };
        let len = repr.emit(buf).ok()?;
        self.ack_sent(q, probe);
        self.stats.tx_packets += 1;
        self.stats.tx_acks += 1;
        // Spec: MR-5.4.4 — the reply mirrors the data's source port.
        Some(Transmit {
            len,
            path: q as u8,
            src_port: port,
            ecn: Ecn::Ect0,
            ack: true,
        })
    }
}

fn mem_syndrome(e: MemError) -> Syndrome {
    match e {
        // A fault is never reported (MR-9.2.5); every caller handles it before.
        MemError::Access | MemError::Fault => Syndrome::NakAccess,
        MemError::Operation => Syndrome::NakRemoteOp,
    }
}

/// Places the first `len` bytes of request payload `data` at message offset
/// `off` (MR-4.2.1), one piece of the datagram at a time.
fn place<R: Responder + LocalMemory>(
    mem: &mut R,
    s: &MsgSlot,
    off: u32,
    data: Payload<'_>,
    len: usize,
) -> Result<(), MemError> {
    if len == 0 {
        return Ok(());
    }
    match Opcode::from_u8(s.op) {
        Some(Opcode::Write | Opcode::WriteImm) => {
            // Spec: MR-9.2.2 — address arithmetic never wraps.
            let va = s.va.checked_add(off as u64).ok_or(MemError::Access)?;
            va.checked_add(len as u64).ok_or(MemError::Access)?;
            data.for_each_in(0, len, |at, piece| {
                mem.write_remote(s.rkey, va + at as u64, piece)
            })
        }
        Some(Opcode::Send | Opcode::SendImm | Opcode::SendInv) => {
            data.for_each_in(0, len, |at, piece| {
                mem.write_recv(s.recv_wr, off.wrapping_add(at as u32), piece)
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// Spec: MR-10.3 — the documented per-QP state breakdown.
    #[test]
    fn state_breakdown() {
        let rows = [
            ("Pkt (in-flight meta)", core::mem::size_of::<Pkt>()),
            ("SqEntry", core::mem::size_of::<SqEntry>()),
            ("MsgSlot", core::mem::size_of::<MsgSlot>()),
            ("Path", core::mem::size_of::<Path>()),
            ("Job", core::mem::size_of::<Job>()),
            ("Completion", core::mem::size_of::<Completion>()),
            ("Connection", core::mem::size_of::<Connection>()),
        ];
        for (n, s) in rows {
            println!("{n}: {s}");
        }
        assert_eq!(core::mem::size_of::<Pkt>(), 32);
        assert!(core::mem::size_of::<Connection>() <= 28 * 1024);
        // Keep Documentation/metaroce/implementation.rst (MR-10.3.1) and
        // proto/README.md in step with these numbers.
        #[cfg(target_pointer_width = "64")]
        {
            assert_eq!(core::mem::size_of::<MsgSlot>(), 144);
            assert_eq!(core::mem::size_of::<SqEntry>(), 80);
            assert_eq!(core::mem::size_of::<Path>(), 184);
            assert_eq!(core::mem::size_of::<Connection>(), 28_224);
        }
    }
}
