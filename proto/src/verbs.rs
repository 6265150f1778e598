//! The verbs-facing types: work requests, completions, status codes and the
//! memory traits through which the core asks the caller to move bytes
//! (MR-2.2, MR-4, MR-7).

/// Operation of a send-queue work request (MR-2.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WrOpcode {
    /// `IB_WR_SEND`.
    Send,
    /// `IB_WR_SEND_WITH_IMM`.
    SendImm,
    /// `IB_WR_SEND_WITH_INV`.
    SendInv,
    /// `IB_WR_RDMA_WRITE`.
    Write,
    /// `IB_WR_RDMA_WRITE_WITH_IMM`.
    WriteImm,
    /// `IB_WR_RDMA_READ`.
    Read,
    /// `IB_WR_ATOMIC_CMP_AND_SWP`.
    AtomicCas,
    /// `IB_WR_ATOMIC_FETCH_AND_ADD`.
    AtomicFaa,
    /// `IB_WR_ATOMIC_WRITE`: 8 bytes of local memory stored at the remote address
    /// as one unit (MR-4.4.6).
    AtomicWrite,
    /// `IB_WR_FLUSH`: the responder makes what earlier messages placed visible
    /// (MR-4.4.7); `len` is the range's length, `imm` the [`Flush`] bits.
    Flush,
}

impl WrOpcode {
    /// The request opcode carried on the wire.
    pub const fn wire(self) -> super::wire::Opcode {
        use super::wire::Opcode as O;
        match self {
            WrOpcode::Send => O::Send,
            WrOpcode::SendImm => O::SendImm,
            WrOpcode::SendInv => O::SendInv,
            WrOpcode::Write => O::Write,
            WrOpcode::WriteImm => O::WriteImm,
            WrOpcode::Read => O::ReadReq,
            WrOpcode::AtomicCas => O::AtomicCas,
            WrOpcode::AtomicFaa => O::AtomicFaa,
            WrOpcode::AtomicWrite => O::AtomicWrite,
            WrOpcode::Flush => O::Flush,
        }
    }
    /// True for RDMA READ and atomics (they produce responses, MR-4.4).
    pub const fn has_response(self) -> bool {
        matches!(
            self,
            WrOpcode::Read | WrOpcode::AtomicCas | WrOpcode::AtomicFaa
        )
    }
}

/// Work request flag: generate a completion on success (`IB_SEND_SIGNALED`).
pub const WR_SIGNALED: u8 = 0x01;
/// Work request flag: fence (`IB_SEND_FENCE`), MR-4.4.3.
pub const WR_FENCE: u8 = 0x02;
/// Work request flag: solicited event (`IB_SEND_SOLICITED`).
pub const WR_SOLICITED: u8 = 0x04;

/// A send-queue work request. Local buffers are not described here: the
/// caller keeps the scatter/gather list and serves [`LocalMemory`] calls by
/// `wr_id` and byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Total length of the local buffer (8 for atomics).
    pub len: u32,
    /// Remote virtual address (WRITE*, READ, atomics).
    pub remote_va: u64,
    /// Remote key (WRITE*, READ, atomics).
    pub rkey: u32,
    /// Immediate data (SEND_IMM, WRITE_IMM) or R_Key to invalidate (SEND_INV).
    pub imm: u32,
    /// Compare value (CAS).
    pub compare: u64,
    /// Swap value (CAS) or addend (FAA).
    pub swap_add: u64,
    /// `WR_*` flags.
    pub flags: u8,
}

impl SendWr {
    fn base(wr_id: u64, opcode: WrOpcode, len: u32) -> Self {
        SendWr {
            wr_id,
            opcode,
            len,
            remote_va: 0,
            rkey: 0,
            imm: 0,
            compare: 0,
            swap_add: 0,
            flags: WR_SIGNALED,
        }
    }
    /// A signaled SEND of `len` bytes.
    pub fn send(wr_id: u64, len: u32) -> Self {
        Self::base(wr_id, WrOpcode::Send, len)
    }
    /// A signaled SEND with immediate data.
    pub fn send_imm(wr_id: u64, len: u32, imm: u32) -> Self {
        SendWr {
            imm,
            ..Self::base(wr_id, WrOpcode::SendImm, len)
        }
    }
    /// A signaled RDMA WRITE.
    pub fn write(wr_id: u64, len: u32, remote_va: u64, rkey: u32) -> Self {
        SendWr {
            remote_va,
            rkey,
            ..Self::base(wr_id, WrOpcode::Write, len)
        }
    }
    /// A signaled RDMA WRITE with immediate data.
    pub fn write_imm(wr_id: u64, len: u32, remote_va: u64, rkey: u32, imm: u32) -> Self {
        SendWr {
            remote_va,
            rkey,
            imm,
            ..Self::base(wr_id, WrOpcode::WriteImm, len)
        }
    }
    /// A signaled RDMA READ of `len` bytes from `(rkey, remote_va)`.
    pub fn read(wr_id: u64, len: u32, remote_va: u64, rkey: u32) -> Self {
        SendWr {
            remote_va,
            rkey,
            ..Self::base(wr_id, WrOpcode::Read, len)
        }
    }
    /// A signaled compare-and-swap.
    pub fn cas(wr_id: u64, remote_va: u64, rkey: u32, compare: u64, swap: u64) -> Self {
        SendWr {
            remote_va,
            rkey,
            compare,
            swap_add: swap,
            ..Self::base(wr_id, WrOpcode::AtomicCas, 8)
        }
    }
    /// A signaled fetch-and-add.
    pub fn faa(wr_id: u64, remote_va: u64, rkey: u32, add: u64) -> Self {
        SendWr {
            remote_va,
            rkey,
            swap_add: add,
            ..Self::base(wr_id, WrOpcode::AtomicFaa, 8)
        }
    }
    /// A signaled ATOMIC_WRITE of the 8 local bytes to `(rkey, remote_va)`.
    pub fn atomic_write(wr_id: u64, remote_va: u64, rkey: u32) -> Self {
        SendWr {
            remote_va,
            rkey,
            ..Self::base(wr_id, WrOpcode::AtomicWrite, 8)
        }
    }
    /// A signaled FLUSH of `len` bytes at `(rkey, remote_va)` (or of the whole
    /// region, as `what` says).
    pub fn flush(wr_id: u64, remote_va: u64, rkey: u32, len: u32, what: Flush) -> Self {
        SendWr {
            remote_va,
            rkey,
            imm: what.to_bits(),
            ..Self::base(wr_id, WrOpcode::Flush, len)
        }
    }
    /// Returns a copy with `flags` replaced.
    pub fn with_flags(self, flags: u8) -> Self {
        SendWr { flags, ..self }
    }
}

/// A receive-queue work request. The caller keeps the scatter list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Total length of the receive buffer.
    pub len: u32,
}

/// Completion status; maps 1:1 onto `enum ib_wc_status` (MR-7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WcStatus {
    /// `IB_WC_SUCCESS`.
    Success,
    /// `IB_WC_LOC_LEN_ERR`: incoming message longer than the receive buffer.
    LocLenErr,
    /// `IB_WC_LOC_QP_OP_ERR`.
    LocQpOpErr,
    /// `IB_WC_LOC_PROT_ERR`: the caller failed a local buffer access.
    LocProtErr,
    /// `IB_WC_WR_FLUSH_ERR`: flushed because the QP entered the error state.
    WrFlushErr,
    /// `IB_WC_MW_BIND_ERR`: a memory window bind the local device refused.
    MwBindErr,
    /// `IB_WC_REM_INV_REQ_ERR`.
    RemInvReqErr,
    /// `IB_WC_REM_ACCESS_ERR`.
    RemAccessErr,
    /// `IB_WC_REM_OP_ERR`.
    RemOpErr,
    /// `IB_WC_RETRY_EXC_ERR`: transport retries exhausted.
    RetryExcErr,
    /// `IB_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr,
}

impl WcStatus {
    /// The numeric `enum ib_wc_status` value (include/rdma/ib_verbs.h),
    /// MR-7.4.1.
    pub const fn ib_wc_status(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::MwBindErr => 6,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
        }
    }
}

/// Completion opcode; maps onto `enum ib_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WcOpcode {
    /// `IB_WC_SEND`.
    Send,
    /// `IB_WC_RDMA_WRITE`.
    RdmaWrite,
    /// `IB_WC_RDMA_READ`.
    RdmaRead,
    /// `IB_WC_COMP_SWAP`.
    CompSwap,
    /// `IB_WC_FETCH_ADD`.
    FetchAdd,
    /// `IB_WC_RECV`.
    Recv,
    /// `IB_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm,
    /// `IB_WC_REG_MR`: a fast registration the local device executed (no packet).
    RegMr,
    /// `IB_WC_LOCAL_INV`: a local invalidation the local device executed (no packet).
    LocalInv,
    /// `IB_WC_BIND_MW`: a memory window bind the local device executed (no packet).
    BindMw,
    /// `IB_WC_ATOMIC_WRITE`.
    AtomicWrite,
    /// `IB_WC_FLUSH`.
    Flush,
}

impl WcOpcode {
    /// The completion opcode of a send-queue operation.
    pub const fn of(op: WrOpcode) -> WcOpcode {
        match op {
            WrOpcode::Send | WrOpcode::SendImm | WrOpcode::SendInv => WcOpcode::Send,
            WrOpcode::Write | WrOpcode::WriteImm => WcOpcode::RdmaWrite,
            WrOpcode::Read => WcOpcode::RdmaRead,
            WrOpcode::AtomicCas => WcOpcode::CompSwap,
            WrOpcode::AtomicFaa => WcOpcode::FetchAdd,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
            WrOpcode::Flush => WcOpcode::Flush,
        }
    }
    /// True for receive-queue completions.
    pub const fn is_recv(self) -> bool {
        matches!(self, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode.
    pub opcode: WcOpcode,
    /// Bytes transferred (receive: message length).
    pub byte_len: u32,
    /// Immediate data, if the message carried it.
    pub imm: Option<u32>,
    /// R_Key invalidated by a SEND_INV.
    pub invalidated_rkey: Option<u32>,
    /// The message was sent with the solicited flag.
    pub solicited: bool,
}

impl Completion {
    /// A completion that carries no immediate data, invalidated key or
    /// solicited flag: every send-queue completion, and every receive that
    /// failed or was flushed.
    pub const fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> Self {
        Completion { wr_id, status, opcode, byte_len, imm: None, invalidated_rkey: None, solicited: false }
    }
}

/// Why the caller refused a memory access (MR-9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MemError {
    /// Key unknown, wrong PD, missing permission, or out of bounds.
    Access,
    /// The operation could not be carried out (e.g. misaligned atomic,
    /// invalid invalidate).
    Operation,
    /// The access is allowed but the memory is not resident now (on-demand
    /// paging): the caller has arranged for it to be brought in, and the
    /// access is to be tried again later, never failed (MR-9.2.5).
    Fault,
}

/// What a FLUSH asks of the responder (MR-3.3.5, MR-4.4.7): the placement
/// type (verbs `ibv_placement_type`) and the selectivity level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flush {
    /// Global visibility (`IBV_FLUSH_GLOBAL`).
    pub global: bool,
    /// Persistence (`IBV_FLUSH_PERSISTENT`).
    pub persistent: bool,
    /// The whole region the R_Key names (`IBV_FLUSH_MR`), not just the range.
    pub whole_region: bool,
}

impl Flush {
    /// Wire bit of [`Flush::global`] (the verbs value).
    pub const GLOBAL: u32 = 0x1;
    /// Wire bit of [`Flush::persistent`] (the verbs value).
    pub const PERSISTENT: u32 = 0x2;
    /// Wire bit of [`Flush::whole_region`].
    pub const WHOLE_REGION: u32 = 0x100;

    /// The request header's `Immediate` field of a FLUSH (MR-3.3.5).
    pub const fn to_bits(self) -> u32 {
        (if self.global { Self::GLOBAL } else { 0 })
            | (if self.persistent { Self::PERSISTENT } else { 0 })
            | (if self.whole_region { Self::WHOLE_REGION } else { 0 })
    }

    /// Decodes the `Immediate` field of a FLUSH: `None` without a placement
    /// type or with a reserved bit set (MR-3.3.5).
    pub const fn from_bits(v: u32) -> Option<Flush> {
        let types = Self::GLOBAL | Self::PERSISTENT;
        if v & !(types | Self::WHOLE_REGION) != 0 || v & types == 0 {
            return None;
        }
        Some(Flush {
            global: v & Self::GLOBAL != 0,
            persistent: v & Self::PERSISTENT != 0,
            whole_region: v & Self::WHOLE_REGION != 0,
        })
    }
}

/// An atomic operation on 8 bytes of registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare-and-swap: if `*p == compare { *p = swap }`.
    Cas {
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// Fetch-and-add: `*p += add` (wrapping).
    Faa {
        /// Addend.
        add: u64,
    },
}

/// Responder-side memory: registered regions addressed by `(rkey, va)`
/// and posted receive buffers addressed by `wr_id`.
///
/// Implementations perform the memory-region lookup, protection-domain,
/// permission and bounds checks, and return [`MemError::Access`] on any
/// failure; the core turns that into the right NAK (MR-9.2.1). The core
/// never calls these with a range whose end overflows `u64`.
pub trait Responder {
    /// Places `data` at `(rkey, va)` (RDMA WRITE placement).
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError>;
    /// Reads `out.len()` bytes at `(rkey, va)` (RDMA READ source). Like
    /// [`LocalMemory::read_local`], `out` is the end of a packet being built,
    /// which the connection does not read back.
    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError>;
    /// Executes an atomic at `(rkey, va)`, returning the original value.
    /// Called exactly once per atomic request (MR-5.6.1).
    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// Stores the 8 bytes of an ATOMIC_WRITE at `(rkey, va)` (8-byte aligned) as
    /// one unit: no atomic of this responder sees part of it (MR-4.4.6). Needs
    /// remote write access, as an RDMA WRITE does. The default is
    /// [`Responder::write_remote`], which is enough where nothing else touches
    /// the memory concurrently.
    fn atomic_write_remote(&mut self, rkey: u32, va: u64, bytes: &[u8; 8]) -> Result<(), MemError> {
        self.write_remote(rkey, va, bytes)
    }
    /// Carries out a FLUSH (MR-4.4.7) of `len` bytes at `(rkey, va)`, or of the
    /// whole region `rkey` names: checks the key, protection domain, bounds
    /// (unless the whole region) and the flush rights the placement types need,
    /// then makes what was placed there visible as asked. Called at the FLUSH's
    /// delivery turn, so every earlier message of the QP has been placed. The
    /// default refuses every FLUSH (no region grants a flush right).
    fn flush_remote(&mut self, rkey: u32, va: u64, len: u32, what: Flush) -> Result<(), MemError> {
        let _ = (rkey, va, len, what);
        Err(MemError::Access)
    }
    /// Places `data` at `offset` of the posted receive buffer `wr_id`.
    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError>;
    /// Invalidates `rkey` (SEND_INV).
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError>;
    /// A receive WQE from a shared receive queue (verbs SRQ), for a connection
    /// that has none posted for a message that has just arrived (MR-4.2.3).
    /// Called only then, once per missing WQE, in SSN order; the WQE is the
    /// connection's from then on (completed or flushed like a posted one).
    /// `None` (the default: no shared queue, or it is empty) refuses the
    /// packet with an RNR NAK (MR-4.2.4).
    fn take_shared_recv(&mut self) -> Option<RecvWr> {
        None
    }
    /// Whether every byte handed to [`Responder::write_remote`],
    /// [`Responder::write_recv`] and [`LocalMemory::write_local`] so far is in
    /// memory. Spec: MR-10.1.3 — an implementation that finishes a copy after
    /// the call returned says `false` until it has; the connection then holds
    /// delivery (MR-4.3.2) at the next message until
    /// `Connection::resume_delivery`. The default: every copy is done
    /// before the call returns.
    fn placed(&mut self) -> bool {
        true
    }
}

/// Requester-side memory: the local buffers of posted send WRs, by `wr_id`.
pub trait LocalMemory {
    /// Gathers `out.len()` bytes at `offset` of the local buffer of `wr_id`
    /// (SEND/WRITE payload).
    ///
    /// Spec: MR-10.1.1 — `out` is the end of the packet
    /// `Connection::poll_transmit` is building, which the connection never
    /// reads back: an implementation may
    /// leave it unwritten, note where it belongs, and attach the source memory to
    /// the outgoing packet instead (zero-copy transmit), as long as the packet
    /// leaves with those bytes there.
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError>;
    /// Scatters `data` at `offset` of the local buffer of `wr_id` (READ
    /// response data, atomic original value in native byte order).
    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError>;
}

/// Everything a connection needs from the caller's memory.
pub trait Memory: Responder + LocalMemory {}
impl<T: Responder + LocalMemory> Memory for T {}

/// ECN codepoint to set on a transmitted packet (MR-2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Ecn {
    /// Not ECN-capable.
    NotEct,
    /// ECT(0).
    Ect0,
}

/// One packet written by `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes of the caller's buffer that form the packet.
    pub len: usize,
    /// Path index the packet was scheduled on.
    pub path: u8,
    /// UDP source port to send it from (MR-6.1.1).
    pub src_port: u16,
    /// ECN codepoint for the IP header.
    pub ecn: Ecn,
    /// An ACK or NAK: it carries no PSN (MR-3.2.7), so its order against the
    /// connection's other packets does not matter and it may leave after them
    /// (MR-10.3.4).
    pub ack: bool,
}

/// The wait a verbs `min_rnr_timer` code asks for, in nanoseconds: the IBTA
/// table of 5-bit codes, where 0 is 655.36 ms and 1..=31 run from 0.01 ms to
/// 491.52 ms (each about 1.5 times the one before).
pub const fn verbs_rnr_timer_ns(code: u8) -> u64 {
    // Units of 10 µs.
    const TABLE: [u32; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    TABLE[(code & 31) as usize] as u64 * 10_000
}

/// Spec: MR-7.1.2 — the RNR Timer code (MR-3.5.6) a responder advertises for
/// the verbs `min_rnr_timer` code: the shortest delay not below the verbs one.
pub const fn rnr_timer_code_for_verbs(code: u8) -> u8 {
    super::wire::rnr_timer_code(verbs_rnr_timer_ns(code))
}

/// Error returned by `post_send` / `post_recv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The queue is full.
    QueueFull,
    /// The QP is not in a state that accepts this post (a flush completion
    /// has been queued instead when in the error state).
    BadState,
    /// The work request is invalid (e.g. length over 2^31, misaligned atomic).
    Invalid,
}
