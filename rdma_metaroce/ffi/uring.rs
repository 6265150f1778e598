// SPDX-License-Identifier: GPL-2.0

//! Queues mapped into a process: the completion ring of a user CQ ([`UserCq`]) and
//! the send and receive rings of a user RC QP ([`UserQueues`]). The layout is
//! `uapi/rdma_user_metaroce.h`, shared with the rdma-core provider.
//!
//! The rings are how a verbs program posts and polls without a system call per work
//! request: it writes send/receive WQEs and reads completions in memory it shares
//! with the module. Everything the process can write is untrusted here: an entry is
//! copied out of the shared page before any field of it is looked at, counters that
//! claim more entries than the ring holds put the QP in error, and every field is
//! checked as the command path checks it (the engine's `post_send`/`post_recv`).
//!
//! A work queue's consumer counter is published as "entries read minus entries the
//! engine still holds", so it advances when a work request completes: a full ring
//! means `max_send_wr`/`max_recv_wr` requests outstanding, as verbs defines it.

use super::raw;
use crate::cq::{Grh, Wc};
use crate::engine::{Engine, Io, LocalOp, SendRequest, Sge, UdDest};
use crate::mr::Bind;
use crate::proto::WrOpcode;
use crate::qp::{QpCaps, MAX_INLINE, MAX_SGE};
use core::cell::Cell;
use core::ffi::c_int;
use core::mem::{size_of, MaybeUninit};
use core::ptr::NonNull;
use kernel::prelude::*;

/// Offset of the producer and consumer counters in a ring's header.
const PRODUCER: usize = core::mem::offset_of!(raw::metaroce_ring_hdr, producer);
const CONSUMER: usize = core::mem::offset_of!(raw::metaroce_ring_hdr, consumer);
const FLAGS: usize = core::mem::offset_of!(raw::metaroce_ring_hdr, flags);
const ENTRIES: usize = raw::METAROCE_RING_ENTRIES as usize;
const _: () = assert!(size_of::<raw::metaroce_ring_hdr>() <= ENTRIES);

const SGE: usize = size_of::<raw::metaroce_sge>();
const SEND_HDR: usize = size_of::<raw::metaroce_send_wqe>();
const RECV_HDR: usize = size_of::<raw::metaroce_recv_wqe>();
/// The largest send entry: the header plus the larger of the SGE list and inline data.
const SEND_MAX: usize = SEND_HDR + if MAX_SGE as usize * SGE > MAX_INLINE as usize {
    MAX_SGE as usize * SGE
} else {
    MAX_INLINE as usize
};
const RECV_MAX: usize = RECV_HDR + MAX_SGE as usize * SGE;
const _: () = assert!(SEND_HDR % 16 == 0 && RECV_HDR % 16 == 0 && SGE == 16);

/// One ring shared with a process.
///
/// # Invariants
///
/// `mem` came from `mrc_ring_mem_new` for `ENTRIES + entries * stride` bytes (or
/// more) and is removed exactly once, on drop; `kva` is its kernel address, valid
/// until then (ib_core frees the pages only after the removal and the last
/// munmap). `entries > 0`; `stride` is a multiple of 16.
struct UserRing {
    mem: NonNull<raw::mrc_ring_mem>,
    kva: NonNull<u8>,
    entries: u32,
    stride: u32,
    size: u64,
}

// SAFETY: The ring is plain shared memory plus an mmap entry that ib_core may
// remove from any thread; every access goes through copies and acquire/release
// helpers.
unsafe impl Send for UserRing {}
// SAFETY: As above; `&self` methods only read or copy.
unsafe impl Sync for UserRing {}

impl UserRing {
    /// A ring of `entries` entries of `stride` bytes, mappable by the process that
    /// issued `udata`'s command.
    ///
    /// # Safety
    ///
    /// `udata` is the driver udata of a uverbs command in progress.
    unsafe fn new(udata: *mut raw::ib_udata, entries: u32, stride: usize) -> Result<Self> {
        if entries == 0 || stride % 16 != 0 {
            return Err(EINVAL);
        }
        let size = (entries as usize).checked_mul(stride).and_then(|b| b.checked_add(ENTRIES)).ok_or(EINVAL)?;
        let mut err: c_int = 0;
        // SAFETY: Per the contract `udata` belongs to a live command; the helper
        // allocates zeroed, page-aligned memory and inserts an mmap entry.
        let mem = unsafe { raw::mrc_ring_mem_new(udata, size, &mut err) };
        let mem = NonNull::new(mem).ok_or_else(|| Error::from_errno(err))?;
        // SAFETY: A live ring memory object.
        let kva = unsafe { raw::mrc_ring_mem_kva(mem.as_ptr()) };
        Ok(Self {
            mem,
            // SAFETY: vmalloc_user never returns NULL on success.
            kva: unsafe { NonNull::new_unchecked(kva.cast()) },
            entries,
            stride: stride as u32,
            size: size as u64,
        })
    }

    /// What the process needs to map the ring.
    fn info(&self) -> raw::metaroce_ring_info {
        raw::metaroce_ring_info {
            // SAFETY: A live ring memory object (type invariant).
            mmap_offset: unsafe { raw::mrc_ring_mem_offset(self.mem.as_ptr()) },
            mmap_size: self.size,
            num_entries: self.entries,
            entry_size: self.stride,
        }
    }

    fn counter(&self, at: usize) -> *mut u32 {
        // SAFETY: `at` is inside the header, within the mapping (type invariant).
        unsafe { self.kva.as_ptr().add(at).cast() }
    }

    /// The process's (or our) counter at `at`, with acquire semantics.
    fn load(&self, at: usize) -> u32 {
        // SAFETY: An aligned u32 inside the live mapping.
        unsafe { raw::mrc_load_acquire_u32(self.counter(at)) }
    }

    /// Publishes our counter at `at`, with release semantics.
    fn store(&self, at: usize, v: u32) {
        // SAFETY: An aligned u32 inside the live mapping.
        unsafe { raw::mrc_store_release_u32(self.counter(at), v) }
    }

    fn slot(&self, i: u32) -> *mut u8 {
        let off = ENTRIES + (i % self.entries) as usize * self.stride as usize;
        // SAFETY: `off + stride` is inside the mapping (type invariant).
        unsafe { self.kva.as_ptr().add(off) }
    }

    /// Copies entry `i` into `out` (at most one stride) and returns the copy. The
    /// process may be writing it concurrently; a torn copy is merely a malformed
    /// entry, which the caller rejects like any other. `out` need not be
    /// initialized: zeroing a buffer of the largest entry for every one read cost
    /// more than the copy.
    fn read<'b>(&self, i: u32, out: &'b mut [MaybeUninit<u8>]) -> &'b [u8] {
        let n = out.len().min(self.stride as usize);
        // SAFETY: `slot(i)` has `stride` readable bytes; `out` is ours, with room
        // for `n` bytes (`MaybeUninit<u8>` has the layout of `u8`).
        unsafe { core::ptr::copy_nonoverlapping(self.slot(i), out.as_mut_ptr().cast::<u8>(), n) };
        // SAFETY: The copy above initialized the first `n` bytes of `out`.
        unsafe { core::slice::from_raw_parts(out.as_ptr().cast::<u8>(), n) }
    }

    /// Writes `data` (at most one stride) as entry `i`.
    fn write(&self, i: u32, data: &[u8]) {
        let n = data.len().min(self.stride as usize);
        // SAFETY: `slot(i)` has `stride` writable bytes.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), self.slot(i), n) };
    }
}

impl Drop for UserRing {
    fn drop(&mut self) {
        // SAFETY: Removed exactly once (type invariant); the memory itself is freed
        // by ib_core's `mmap_free` after the process unmaps it.
        unsafe { raw::mrc_ring_mem_remove(self.mem.as_ptr()) };
    }
}

/// Copies a driver response to the process, truncated to the room it gave.
///
/// # Safety
///
/// `udata` is the driver udata of a uverbs command in progress.
unsafe fn respond<T>(udata: *mut raw::ib_udata, resp: &T) -> Result {
    // SAFETY: Per the contract; `resp` is readable for its size.
    let ret = unsafe { raw::mrc_udata_respond(udata, (resp as *const T).cast(), size_of::<T>()) };
    if ret == 0 { Ok(()) } else { Err(Error::from_errno(ret)) }
}

/// Whether the process left room for a driver response of type `T`.
///
/// # Safety
///
/// `udata` is NULL or the driver udata of a uverbs command in progress.
pub(super) unsafe fn wants<T>(udata: *const raw::ib_udata) -> bool {
    // SAFETY: Per the contract.
    unsafe { udata.as_ref() }.is_some_and(|u| u.outlen >= size_of::<T>())
}

/// `wc_flags` and network header type of a completion, as `struct ib_wc` has them.
pub(super) fn wc_flags(w: &Wc) -> (u32, Option<u8>) {
    let mut flags = 0u32;
    let net = match w.grh {
        Grh::None => None,
        Grh::Ipv4 => Some(raw::rdma_network_type_RDMA_NETWORK_IPV4 as u8),
        Grh::Ipv6 => Some(raw::rdma_network_type_RDMA_NETWORK_IPV6 as u8),
    };
    if net.is_some() {
        flags |= raw::ib_wc_flags_IB_WC_GRH | raw::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE;
    }
    if w.imm.is_some() {
        flags |= raw::ib_wc_flags_IB_WC_WITH_IMM;
    } else if w.invalidated_rkey.is_some() {
        flags |= raw::ib_wc_flags_IB_WC_WITH_INVALIDATE;
    }
    (flags, net)
}

// ---------------------------------------------------------------------------------
// Completion queue.

/// The completion ring of a CQ created by a process.
pub(crate) struct UserCq {
    ring: UserRing,
    /// Completions written so far (our producer counter; the shared copy is
    /// published after each entry).
    produced: u32,
}

impl UserCq {
    /// A ring for `cqe` completions if the process asked for one (`Ok(None)`: it did
    /// not, e.g. an older provider; the CQ is then polled through the kernel).
    ///
    /// # Safety
    ///
    /// `udata` is NULL or the driver udata of a create_cq command in progress.
    pub(super) unsafe fn new(udata: *mut raw::ib_udata, cqe: u32) -> Result<Option<Self>> {
        // SAFETY: Per the contract.
        if !unsafe { wants::<raw::metaroce_create_cq_resp>(udata) } {
            return Ok(None);
        }
        // SAFETY: Per the contract.
        let ring = unsafe { UserRing::new(udata, cqe, size_of::<raw::ib_uverbs_wc>())? };
        Ok(Some(Self { ring, produced: 0 }))
    }

    /// Tells the process where the ring is.
    ///
    /// # Safety
    ///
    /// As for `new`.
    pub(super) unsafe fn respond(&self, udata: *mut raw::ib_udata) -> Result {
        let resp = raw::metaroce_create_cq_resp { cq: self.ring.info() };
        // SAFETY: Per the contract.
        unsafe { respond(udata, &resp) }
    }

    /// Room left, by the process's consumer counter (a counter claiming more than
    /// the ring holds counts as full: the process broke the protocol).
    fn room(&self) -> u32 {
        let used = self.produced.wrapping_sub(self.ring.load(CONSUMER));
        self.ring.entries.saturating_sub(used)
    }

    /// Writes a completion; false if the ring is full (the CQ overflowed).
    pub(crate) fn push(&mut self, w: &Wc) -> bool {
        if self.room() == 0 {
            return false;
        }
        let (wc_flags, _) = wc_flags(w);
        let mut e = raw::ib_uverbs_wc {
            wr_id: w.wr_id,
            status: w.status.ib_wc_status(),
            opcode: crate::cq::wc_opcode_raw(w.opcode),
            byte_len: w.byte_len,
            qp_num: w.qpn,
            src_qp: w.src_qp,
            wc_flags,
            port_num: 1,
            ..Default::default()
        };
        if let Some(imm) = w.imm {
            e.ex.imm_data = imm.to_be();
        } else if let Some(rkey) = w.invalidated_rkey {
            e.ex.invalidate_rkey = rkey;
        }
        // SAFETY: `ib_uverbs_wc` is plain old data without padding.
        let bytes = unsafe {
            core::slice::from_raw_parts((&raw const e).cast::<u8>(), size_of::<raw::ib_uverbs_wc>())
        };
        self.ring.write(self.produced, bytes);
        self.produced = self.produced.wrapping_add(1);
        self.ring.store(PRODUCER, self.produced);
        true
    }

    /// Completions the process has not consumed yet.
    pub(crate) fn pending(&self) -> bool {
        self.ring.load(CONSUMER) != self.produced
    }

    /// Completions the ring holds.
    pub(crate) fn entries(&self) -> u32 {
        self.ring.entries
    }

    /// A ring replacing this one in a resize (`ibv_resize_cq`), for `cqe`
    /// completions; `EINVAL` if the process left no room for where it is.
    ///
    /// # Safety
    ///
    /// `udata` is NULL or the driver udata of a resize_cq command in progress.
    pub(super) unsafe fn for_resize(udata: *mut raw::ib_udata, cqe: u32) -> Result<Self> {
        // SAFETY: Per the contract.
        if !unsafe { wants::<raw::metaroce_resize_cq_resp>(udata) } {
            return Err(EINVAL);
        }
        // SAFETY: Per the contract.
        let ring = unsafe { UserRing::new(udata, cqe, size_of::<raw::ib_uverbs_wc>())? };
        Ok(Self { ring, produced: 0 })
    }

    /// Tells the process where the ring that replaces its old one is. The process
    /// maps it only if the resize succeeds.
    ///
    /// # Safety
    ///
    /// As for `for_resize`.
    pub(super) unsafe fn respond_resize(&self, udata: *mut raw::ib_udata) -> Result {
        let resp = raw::metaroce_resize_cq_resp { cq: self.ring.info() };
        // SAFETY: Per the contract.
        unsafe { respond(udata, &resp) }
    }

    /// Copies the completions the process has not consumed, in order, to the
    /// start of `to` (a new, unused ring). `EINVAL` if they do not fit, or if the
    /// process's consumer counter claims more than this ring holds (it broke the
    /// ring protocol; nothing is copied).
    pub(crate) fn move_waiting_into(&self, to: &mut UserCq) -> Result {
        let consumer = self.ring.load(CONSUMER);
        let waiting = self.produced.wrapping_sub(consumer);
        if waiting > self.ring.entries || waiting > to.ring.entries || to.produced != 0 {
            return Err(EINVAL);
        }
        let mut buf = [const { MaybeUninit::<u8>::uninit() }; size_of::<raw::ib_uverbs_wc>()];
        for k in 0..waiting {
            // A process that scribbled on its completion slots only misleads itself.
            let e = self.ring.read(consumer.wrapping_add(k), &mut buf);
            to.ring.write(k, e);
        }
        to.produced = waiting;
        to.ring.store(PRODUCER, waiting);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Work queues.

/// The send and receive rings of an RC or UD QP created by a process.
pub(crate) struct UserQueues {
    /// A UD QP: every send entry names its destination.
    ud: bool,
    sq: UserRing,
    /// Send entries taken into the engine so far.
    sq_read: u32,
    /// `None` for a QP on an SRQ (its receives come from the SRQ).
    rq: Option<UserRing>,
    rq_read: u32,
    max_send_sge: u32,
    max_inline: u32,
    max_recv_sge: u32,
    /// What the rings' headers were last given (send consumer, receive consumer,
    /// flags), so that a run that changed nothing stores nothing: every store is a
    /// call into the C helpers, and every run ends with a publication.
    published: Cell<Option<(u32, u32, u32)>>,
}

/// Entry size holding a header and `n` bytes behind it.
fn stride(hdr: usize, n: usize) -> usize {
    (hdr + n).next_multiple_of(16)
}

impl UserQueues {
    /// Rings for a new RC or UD QP with capabilities `caps`, if the process asked
    /// for them.
    ///
    /// # Safety
    ///
    /// `udata` is NULL or the driver udata of a create_qp command in progress.
    pub(super) unsafe fn new(udata: *mut raw::ib_udata, caps: &QpCaps, on_srq: bool, ud: bool) -> Result<Option<Self>> {
        // SAFETY: Per the contract.
        if !unsafe { wants::<raw::metaroce_create_qp_resp>(udata) } {
            return Ok(None);
        }
        let send_bytes = (caps.max_send_sge as usize * SGE).max(caps.max_inline_data as usize);
        // SAFETY: Per the contract.
        let sq = unsafe { UserRing::new(udata, caps.max_send_wr.max(1), stride(SEND_HDR, send_bytes))? };
        let rq = if on_srq {
            None
        } else {
            let n = caps.max_recv_sge as usize * SGE;
            // SAFETY: Per the contract.
            Some(unsafe { UserRing::new(udata, caps.max_recv_wr.max(1), stride(RECV_HDR, n))? })
        };
        Ok(Some(Self {
            ud,
            sq,
            sq_read: 0,
            rq,
            rq_read: 0,
            max_send_sge: caps.max_send_sge,
            max_inline: caps.max_inline_data,
            max_recv_sge: caps.max_recv_sge,
            published: Cell::new(None),
        }))
    }

    /// Tells the process where the rings are.
    ///
    /// # Safety
    ///
    /// As for `new`.
    pub(super) unsafe fn respond(&self, udata: *mut raw::ib_udata) -> Result {
        let resp = raw::metaroce_create_qp_resp {
            sq: self.sq.info(),
            rq: self.rq.as_ref().map(|r| r.info()).unwrap_or_default(),
        };
        // SAFETY: Per the contract.
        unsafe { respond(udata, &resp) }
    }

    /// The process posted entries not taken yet (or wrote a counter the pull
    /// will refuse). Most runs find none; asking costs two loads.
    pub(crate) fn has_posted(&self) -> bool {
        self.sq.load(PRODUCER) != self.sq_read || self.rq.as_ref().is_some_and(|rq| rq.load(PRODUCER) != self.rq_read)
    }

    /// Moves newly posted work requests into the engine (as many as it has room
    /// for). A malformed entry completes with a local QP operation error and puts
    /// the QP in error, as the process broke the ring protocol or posted something
    /// the command path would have refused.
    pub(crate) fn pull(&mut self, eng: &mut Engine, io: &mut impl Io) {
        self.pull_sends(eng, io);
        self.pull_recvs(eng, io);
    }

    fn pull_sends(&mut self, eng: &mut Engine, io: &mut impl Io) {
        if !eng.accepts_sends() {
            return;
        }
        let avail = self.sq.load(PRODUCER).wrapping_sub(self.sq_read);
        if avail > self.sq.entries {
            eng.reject_posted(io, false, 0);
            return;
        }
        let mut buf = [const { MaybeUninit::<u8>::uninit() }; SEND_MAX];
        let mut sges = [const { MaybeUninit::<Sge>::uninit() }; MAX_SGE as usize];
        for _ in 0..avail.min(eng.send_room()) {
            // The entry's stride fits the largest inline payload the QP allows;
            // a typical entry uses a fraction of it. Copy what most entries use,
            // and the rest only when the header says it is needed.
            let e = self.sq.read(self.sq_read, &mut buf[..SEND_FIRST]);
            let used = send_entry_len(e);
            let e = if used > e.len() { self.sq.read(self.sq_read, &mut buf[..used.min(SEND_MAX)]) } else { e };
            self.sq_read = self.sq_read.wrapping_add(1);
            let r = self.decode_send(e, &mut sges).and_then(|req| eng.post_send(&req).map(|()| req.wr_id));
            if r.is_err() {
                eng.reject_posted(io, false, send_wr_id(e));
                return;
            }
        }
    }

    fn pull_recvs(&mut self, eng: &mut Engine, io: &mut impl Io) {
        let Some(rq) = self.rq.as_ref() else { return };
        if !eng.accepts_recvs() {
            return;
        }
        let avail = rq.load(PRODUCER).wrapping_sub(self.rq_read);
        if avail > rq.entries {
            eng.reject_posted(io, true, 0);
            return;
        }
        let mut buf = [const { MaybeUninit::<u8>::uninit() }; RECV_MAX];
        let mut sges = [const { MaybeUninit::<Sge>::uninit() }; MAX_SGE as usize];
        for _ in 0..avail.min(eng.recv_room()) {
            let e = rq.read(self.rq_read, &mut buf);
            self.rq_read = self.rq_read.wrapping_add(1);
            let wr_id = u64_at(e, 0);
            let n = u32_at(e, 8);
            let ok = n <= self.max_recv_sge
                && read_sges(e, RECV_HDR, n, &mut sges).is_some_and(|list| eng.post_recv(wr_id, list).is_ok());
            if !ok {
                eng.reject_posted(io, true, wr_id);
                return;
            }
        }
    }

    /// Decodes a send entry (a private copy) into a request.
    fn decode_send<'a>(
        &self,
        e: &'a [u8],
        sges: &'a mut [MaybeUninit<Sge>; MAX_SGE as usize],
    ) -> Result<SendRequest<'a>> {
        if e.len() < SEND_HDR {
            return Err(EINVAL);
        }
        let opcode = u32_at(e, 8);
        let flags = u32_at(e, 12);
        let num_sge = u32_at(e, 16);
        let inline_len = u32_at(e, 20);
        let ex = u32_at(e, 24);
        let has = |f: i32| flags & f as u32 != 0;
        // Memory operations the device executes in send-queue order (spec
        // MR-9.2.4): the window's key in `ex`, the bind's fields as the header
        // file lays them out.
        let local = match opcode {
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_LOCAL_INV => Some(LocalOp::LocalInv { key: ex }),
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_BIND_MW => {
                let swap = u64_at(e, 48);
                Some(LocalOp::BindMw(Bind {
                    window: ex,
                    new_key: u32_at(e, 28),
                    region: swap as u32,
                    addr: u64_at(e, 32),
                    length: u64_at(e, 40),
                    access: (swap >> 32) as u32,
                }))
            }
            _ => None,
        };
        if let Some(op) = local {
            // (The engine refuses them on a UD QP.)
            if num_sge != 0 || inline_len != 0 {
                return Err(EINVAL);
            }
            let (signaled, fence) = (has(raw::ib_send_flags_IB_SEND_SIGNALED), has(raw::ib_send_flags_IB_SEND_FENCE));
            return Ok(SendRequest::local(u64_at(e, 0), signaled, fence, op));
        }
        let op = match opcode {
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_SEND => WrOpcode::Send,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_SEND_WITH_IMM => WrOpcode::SendImm,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_SEND_WITH_INV => WrOpcode::SendInv,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_RDMA_WRITE => WrOpcode::Write,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_RDMA_WRITE_WITH_IMM => WrOpcode::WriteImm,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_RDMA_READ => WrOpcode::Read,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCas,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFaa,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_ATOMIC_WRITE => WrOpcode::AtomicWrite,
            raw::ib_uverbs_wr_opcode_IB_UVERBS_WR_FLUSH => WrOpcode::Flush,
            _ => return Err(EINVAL),
        };
        let inline = if has(raw::ib_send_flags_IB_SEND_INLINE) {
            let n = inline_len as usize;
            if inline_len > self.max_inline {
                return Err(EINVAL);
            }
            Some(e.get(SEND_HDR..SEND_HDR + n).ok_or(EINVAL)?)
        } else if op == WrOpcode::AtomicWrite && num_sge == 0 {
            // `ibv_wr_atomic_write` hands the provider the 8 bytes themselves; it
            // passes them in the entry's `compare_add` field.
            Some(e.get(40..48).ok_or(EINVAL)?)
        } else {
            None
        };
        let sges: &[Sge] = if inline.is_some() {
            &[]
        } else {
            if num_sge > self.max_send_sge {
                return Err(EINVAL);
            }
            read_sges(e, SEND_HDR, num_sge, sges).ok_or(EINVAL)?
        };
        let (compare, swap_add) = crate::engine::atomic_operands(op, u64_at(e, 40), u64_at(e, 48));
        // A FLUSH's range length travels in `compare_add`, its bits in `ex`.
        let flush_len = if op == WrOpcode::Flush { u32::try_from(u64_at(e, 40)).map_err(|_| EINVAL)? } else { 0 };
        Ok(SendRequest {
            wr_id: u64_at(e, 0),
            op,
            signaled: has(raw::ib_send_flags_IB_SEND_SIGNALED),
            solicited: has(raw::ib_send_flags_IB_SEND_SOLICITED),
            fence: has(raw::ib_send_flags_IB_SEND_FENCE),
            sges,
            inline,
            remote_va: u64_at(e, 32),
            rkey: u32_at(e, 28),
            imm: if matches!(op, WrOpcode::SendInv | WrOpcode::Flush) { ex } else { u32::from_be(ex) },
            compare,
            swap_add,
            flush_len,
            // The engine refuses anything but SEND/SEND_IMM with a destination on a
            // UD QP, and a destination on an RC QP.
            ud: self.ud.then(|| {
                let mut dgid = [0u8; 16];
                dgid.copy_from_slice(&e[56..72]);
                UdDest { dgid, qpn: u32_at(e, 72), qkey: u32_at(e, 76) }
            }),
            local: None,
        })
    }

    /// Forgets every entry posted so far (the QP was reset: verbs discards all
    /// outstanding work without completions).
    pub(crate) fn discard_posted(&mut self) {
        self.sq_read = self.sq.load(PRODUCER);
        if let Some(rq) = self.rq.as_ref() {
            self.rq_read = rq.load(PRODUCER);
        }
    }

    /// Publishes how far each queue has been consumed: entries read minus those the
    /// engine still holds (they free their slot when they complete).
    /// Also tells it whether the QP is in error (then work it posts is flushed
    /// only when it rings the doorbell).
    pub(crate) fn publish(&self, eng: &Engine) {
        let (sq_held, rq_held) = eng.held();
        self.publish_held(sq_held, rq_held, eng.errored());
    }

    /// [`Self::publish`] with the engine's figures: `sq_held`/`rq_held` requests
    /// still held, `errored` the QP is in error.
    pub(crate) fn publish_held(&self, sq_held: u32, rq_held: u32, errored: bool) {
        let flags = if errored { raw::METAROCE_RING_F_ERROR } else { 0 };
        let (sq_consumed, rq_consumed) = (self.sq_read.wrapping_sub(sq_held), self.rq_read.wrapping_sub(rq_held));
        if self.published.replace(Some((sq_consumed, rq_consumed, flags))) == Some((sq_consumed, rq_consumed, flags)) {
            return;
        }
        self.sq.store(FLAGS, flags);
        self.sq.store(CONSUMER, sq_consumed);
        if let Some(rq) = self.rq.as_ref() {
            rq.store(FLAGS, flags);
            rq.store(CONSUMER, rq_consumed);
        }
    }
}

fn u32_at(e: &[u8], at: usize) -> u32 {
    e.get(at..at + 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(e: &[u8], at: usize) -> u64 {
    u64::from(u32_at(e, at)) | (u64::from(u32_at(e, at + 4)) << 32)
}

/// Bytes of a send entry a first read copies: the header and 64 bytes, enough
/// for four SGEs or 64 bytes of inline data.
const SEND_FIRST: usize = if SEND_HDR + 64 < SEND_MAX { SEND_HDR + 64 } else { SEND_MAX };

/// Bytes of send entry `e` (a copy holding at least its header) in use: the
/// header, then its inline data or its SGE list. Not checked against anything:
/// `decode_send` refuses an entry whose fields do not fit what was copied.
fn send_entry_len(e: &[u8]) -> usize {
    let inline = u32_at(e, 12) & raw::ib_send_flags_IB_SEND_INLINE as u32 != 0;
    let body = if inline { u32_at(e, 20) as usize } else { (u32_at(e, 16) as usize).saturating_mul(SGE) };
    // An ATOMIC_WRITE's operand and a UD destination lie in the header.
    SEND_HDR.saturating_add(body)
}

fn send_wr_id(e: &[u8]) -> u64 {
    u64_at(e, 0)
}

/// Reads `n` SGEs that follow a header of `hdr` bytes into `out` and returns
/// them; `None` if they do not fit.
fn read_sges<'b>(e: &[u8], hdr: usize, n: u32, out: &'b mut [MaybeUninit<Sge>; MAX_SGE as usize]) -> Option<&'b [Sge]> {
    let n = n as usize;
    if n > out.len() || hdr + n * SGE > e.len() {
        return None;
    }
    for (i, o) in out.iter_mut().take(n).enumerate() {
        let at = hdr + i * SGE;
        o.write(Sge { addr: u64_at(e, at), length: u32_at(e, at + 8), lkey: u32_at(e, at + 12) });
    }
    // SAFETY: The loop initialized the first `n` entries (`n <= out.len()`);
    // `MaybeUninit<Sge>` has the layout of `Sge`.
    Some(unsafe { core::slice::from_raw_parts(out.as_ptr().cast::<Sge>(), n) })
}

/// The offsets `decode_send` and `pull_recvs` read are those of the ABI structs.
const _: () = {
    use core::mem::offset_of;
    type S = raw::metaroce_send_wqe;
    assert!(offset_of!(S, wr_id) == 0);
    assert!(offset_of!(S, opcode) == 8);
    assert!(offset_of!(S, send_flags) == 12);
    assert!(offset_of!(S, num_sge) == 16);
    assert!(offset_of!(S, inline_len) == 20);
    assert!(offset_of!(S, ex) == 24);
    assert!(offset_of!(S, rkey) == 28);
    assert!(offset_of!(S, remote_addr) == 32);
    assert!(offset_of!(S, compare_add) == 40);
    assert!(offset_of!(S, swap) == 48);
    assert!(offset_of!(S, dgid) == 56);
    assert!(offset_of!(S, remote_qpn) == 72);
    assert!(offset_of!(S, remote_qkey) == 76);
    assert!(size_of::<S>() == 80);
    type R = raw::metaroce_recv_wqe;
    assert!(offset_of!(R, wr_id) == 0 && offset_of!(R, num_sge) == 8 && size_of::<R>() == 16);
    type G = raw::metaroce_sge;
    assert!(offset_of!(G, addr) == 0 && offset_of!(G, length) == 8 && offset_of!(G, lkey) == 12);
};

/// The FLUSH bits of the user ABI are those of the wire (spec MR-3.3.5).
const _: () = {
    use crate::proto::Flush;
    assert!(raw::METAROCE_FLUSH_GLOBAL == Flush::GLOBAL);
    assert!(raw::METAROCE_FLUSH_PERSISTENT == Flush::PERSISTENT);
    assert!(raw::METAROCE_FLUSH_WHOLE_REGION == Flush::WHOLE_REGION);
};
