// SPDX-License-Identifier: GPL-2.0

//! The data path's contact with the kernel: pinned user memory ([`Umem`]), the table
//! that routes received datagrams to QPs ([`QpTable`]), the per-QP work item that
//! runs the [`Engine`](crate::engine::Engine), transmission, and the post/poll verbs.
//!
//! Concurrency: received datagrams arrive in softirq; they are looked up (under RCU),
//! queued to their QP and the QP is run there, under its engine lock (a lock that
//! excludes softirqs when taken from process context). A process's doorbell runs its
//! QP in the system call; timers and kernel consumers' posts run it from its work
//! item. A QP leaves the table, then an RCU grace period passes, then its work is
//! cancelled, before it is freed.

use super::verbs::{ah_dgid, cq_of, qp_alloc_io, qp_of, srq_of};
use super::{raw, IbDev};
use crate::cq::Pushed;
use crate::engine::{atomic_operands, Io, LocalOp, Received, SendRequest, Sge, Shared, UdDest};
use crate::mr::{Accessor, Need};
use crate::proto::wire::{Opcode, PacketRepr, WireError};
use crate::proto::{Ecn, Instant, WrOpcode};
use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::prelude::*;

// ---------------------------------------------------------------------------------
// Pinned user memory.

/// The pinned pages of one user memory registration (owns an `ib_umem`).
///
/// # Invariants
///
/// `0` came from `mrc_umem_get` and is released exactly once, on drop.
pub(crate) struct Umem(NonNull<raw::ib_umem>);

// SAFETY: An `ib_umem` is plain data plus page references; any thread may copy
// through it and release it.
unsafe impl Send for Umem {}

impl Umem {
    /// Takes ownership of a pinned registration.
    ///
    /// # Safety
    ///
    /// `p` must come from `mrc_umem_get` and not be owned by anything else.
    pub(super) unsafe fn from_raw(p: NonNull<raw::ib_umem>) -> Self {
        Self(p)
    }

    /// Copies `out.len()` bytes from `offset` bytes into the registration; false if
    /// not all of them exist. Never sleeps.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) -> bool {
        // SAFETY: The umem is alive (type invariant); the helper copies at most
        // `out.len()` bytes into `out` through atomic page mappings.
        let n = unsafe { raw::mrc_umem_read(self.0.as_ptr(), offset, out.as_mut_ptr().cast(), out.len()) };
        n == out.len()
    }

    /// Copies `data` to `offset` bytes into the registration; false if not all of it
    /// fits. Never sleeps.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> bool {
        // SAFETY: As in `read`; `data` is only read.
        let n = unsafe { raw::mrc_umem_write(self.0.as_ptr(), offset, data.as_ptr().cast(), data.len()) };
        n == data.len()
    }
}

impl Umem {
    /// Takes references to the pages behind `len` bytes at `offset` into `frags`
    /// (for a zero-copy transmit); false, taking nothing, if the range does not
    /// exist or `frags` has no room for all its pages. Never sleeps.
    pub(crate) fn take_pages(&self, offset: u64, len: usize, frags: &mut TxFrags) -> bool {
        let mut n = frags.n as u32;
        // SAFETY: The umem is alive (type invariant); the helper writes at most
        // `MAX_TX_FRAGS - n` entries from `frags.n` on, each holding a page
        // reference that `frags` now owns (and drops, or hands to an skb).
        let ok = unsafe {
            raw::mrc_umem_frags(self.0.as_ptr(), offset, len, frags.frags.as_mut_ptr(), MAX_TX_FRAGS as u32, &mut n)
        };
        if ok {
            frags.n = (n as usize).min(MAX_TX_FRAGS);
            frags.bytes += len;
        }
        ok
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: Owned (type invariant); released exactly once. May sleep: owners
        // drop it outside any spinlock.
        unsafe { raw::ib_umem_release(self.0.as_ptr()) };
    }
}

/// Kernel virtual memory named through the DMA MR of a kernel consumer (ib_core
/// gives every kernel PD one, as `local_dma_lkey`). A software device has no DMA
/// device, so ib_core's DMA addresses are kernel virtual addresses
/// (`ib_uses_virt_dma`).
///
/// # Invariants
///
/// Only created by `get_dma_mr`, which only kernel consumers can call; they promise
/// (ib_verbs contract) that every address they post with that key is valid kernel
/// memory for the length given, for as long as the work request is outstanding.
pub(crate) struct KernelVa(());

impl KernelVa {
    /// See the type invariant.
    pub(super) fn for_dma_mr() -> Self {
        Self(())
    }

    /// Copies `out.len()` bytes from kernel address `va`.
    pub(crate) fn read(&self, va: u64, out: &mut [u8]) -> bool {
        // SAFETY: By the type invariant `va` names `out.len()` readable bytes.
        unsafe { core::ptr::copy_nonoverlapping(va as usize as *const u8, out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `data` to kernel address `va`.
    pub(crate) fn write(&self, va: u64, data: &[u8]) -> bool {
        // SAFETY: By the type invariant `va` names `data.len()` writable bytes that
        // the consumer handed to the device (a receive or READ target buffer).
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), va as usize as *mut u8, data.len()) };
        true
    }
}

// ---------------------------------------------------------------------------------
// Payload pages sent by reference.

/// Most page parts of one packet's payload sent by reference (the kernel's default
/// `MAX_SKB_FRAGS`): 64 KiB that starts inside a page. A payload that needs more
/// is copied.
pub(crate) const MAX_TX_FRAGS: usize = 17;

/// The payload of the packet being built, as references to the pages of the
/// registration it comes from (zero-copy transmit), instead of bytes in the packet.
///
/// The protocol asks for the payload through [`LocalMemory::read_local`] or
/// [`Responder::read_remote`](crate::proto::Responder::read_remote) with the part
/// of the packet buffer it belongs in, and never reads it back; the engine's memory
/// takes the pages instead and notes where the payload would have gone
/// ([`Self::note_place`]). The packet then leaves with its headers copied and the
/// pages attached ([`crate::engine::Io::transmit_pages`]); if it cannot, the
/// payload is copied into the buffer after all ([`Self::copy_to`]).
///
/// [`LocalMemory::read_local`]: crate::proto::LocalMemory::read_local
///
/// # Invariants
///
/// `frags[..n]` each hold one page reference, owned by this value.
pub(crate) struct TxFrags {
    frags: [raw::mrc_frag; MAX_TX_FRAGS],
    n: usize,
    bytes: usize,
    /// Offset in the packet buffer where the payload's bytes belong.
    place: Option<usize>,
}

impl TxFrags {
    pub(crate) fn new() -> Self {
        Self {
            frags: [raw::mrc_frag { page: core::ptr::null_mut(), off: 0, len: 0 }; MAX_TX_FRAGS],
            n: 0,
            bytes: 0,
            place: None,
        }
    }

    /// Payload bytes held by reference.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Notes that the held bytes belong at `offset` of the packet buffer.
    pub(crate) fn note_place(&mut self, offset: usize) {
        self.place = Some(offset);
    }

    /// Where the held bytes belong in the packet buffer, if noted.
    pub(crate) fn place(&self) -> Option<usize> {
        self.place
    }

    /// Drops every reference (nothing is held afterwards).
    pub(crate) fn clear(&mut self) {
        if self.n > 0 {
            // SAFETY: `frags[..n]` hold references we own (type invariant); after
            // the call none are held, and `n` says so.
            unsafe { raw::mrc_frags_put(self.frags.as_mut_ptr(), self.n as u32) };
        }
        self.n = 0;
        self.bytes = 0;
        self.place = None;
    }

    /// Copies the held bytes to `out` (which must be exactly that long) and
    /// drops the references; false, copying nothing, for any other length.
    pub(crate) fn copy_to(&mut self, out: &mut [u8]) -> bool {
        if out.len() != self.bytes {
            return false;
        }
        // SAFETY: `frags[..n]` are live page parts (type invariant) of `bytes`
        // bytes in all, which is `out.len()`.
        unsafe { raw::mrc_frags_copy(self.frags.as_ptr(), self.n as u32, out.as_mut_ptr()) };
        self.clear();
        true
    }

    /// An skb holding `header` and, as page fragments, the held payload; on
    /// success the references are the skb's.
    fn into_skb(&mut self, header: &[u8]) -> Option<NonNull<raw::sk_buff>> {
        let hl = u32::try_from(header.len()).ok()?;
        // SAFETY: `header` is readable for `hl` bytes; `frags[..n]` hold references
        // (type invariant) that the skb takes over on success.
        let skb = NonNull::new(unsafe {
            raw::mrc_tx_skb_frags(header.as_ptr(), hl, self.frags.as_mut_ptr(), self.n as u32)
        })?;
        // INVARIANT: The references are the skb's now.
        self.n = 0;
        self.bytes = 0;
        self.place = None;
        Some(skb)
    }
}

impl Drop for TxFrags {
    fn drop(&mut self) {
        self.clear();
    }
}

// ---------------------------------------------------------------------------------
// QP lookup for received datagrams.

/// The live QPs of a device by QP-number slot, read locklessly from softirq.
///
/// # Invariants
///
/// A non-NULL slot points to a QP of this driver whose `create_qp` completed and
/// whose `destroy_qp` has not yet passed its RCU grace period.
pub(crate) struct QpTable(KVVec<AtomicPtr<raw::ib_qp>>);

impl QpTable {
    pub(crate) fn new(slots: usize) -> Result<Self> {
        let mut v = KVVec::with_capacity(slots, GFP_KERNEL)?;
        for _ in 0..slots {
            v.push(AtomicPtr::new(core::ptr::null_mut()), GFP_KERNEL)?;
        }
        Ok(Self(v))
    }

    fn slot(qpn: u32) -> usize {
        (qpn & (crate::qp::MAX_QP - 1)) as usize
    }

    fn publish(&self, qpn: u32, qp: *mut raw::ib_qp) {
        if let Some(s) = self.0.get(Self::slot(qpn)) {
            s.store(qp, Ordering::Release);
        }
    }

    fn unpublish(&self, qpn: u32) {
        if let Some(s) = self.0.get(Self::slot(qpn)) {
            s.store(core::ptr::null_mut(), Ordering::Release);
        }
    }

    /// The QP numbered exactly `qpn`, if live. Call under RCU (softirq is).
    fn lookup(&self, qpn: u32) -> Option<*mut raw::ib_qp> {
        let p = self.0.get(Self::slot(qpn))?.load(Ordering::Acquire);
        // SAFETY: Non-NULL slots point to live QPs (type invariant).
        (!p.is_null() && unsafe { (*p).qp_num } == qpn).then_some(p)
    }
}

// ---------------------------------------------------------------------------------
// Per-QP work.

/// Creates the work context of a new QP (process context).
///
/// # Safety
///
/// `qp` must be a QP of this driver being created; it must call [`qp_stop`] before it
/// is freed.
pub(super) unsafe fn qp_start(qp: *mut raw::ib_qp) -> Result<*mut raw::mrc_qp_io> {
    // SAFETY: The work calls `qp_run_cb` with `qp` until `qp_stop` cancels it.
    let io = unsafe { raw::mrc_qp_io_new(qp.cast(), Some(qp_run_cb), Some(qp_fault_cb)) };
    if io.is_null() {
        return Err(ENOMEM);
    }
    // SAFETY: `qp` is alive; its device too.
    let (dev, qpn) = unsafe { (IbDev::from_raw((*qp).device), (*qp).qp_num) };
    dev.data().qp_table.publish(qpn, qp);
    Ok(io)
}

/// Stops a QP's data path: no datagram reaches it and its work has finished.
/// Process context (waits for an RCU grace period and for the work).
///
/// # Safety
///
/// `qp` is a QP of this driver set up by [`qp_start`] with `io`; called once.
pub(super) unsafe fn qp_stop(qp: *mut raw::ib_qp, io: *mut raw::mrc_qp_io) {
    // SAFETY: `qp` and its device are alive until destroy returns.
    let (dev, qpn) = unsafe { (IbDev::from_raw((*qp).device), (*qp).qp_num) };
    dev.data().qp_table.unpublish(qpn);
    // SAFETY: After the grace period no receive path can still hold `qp`; then the
    // work (the only other user of `io`) is cancelled and `io` freed.
    unsafe {
        raw::mrc_synchronize_rcu();
        raw::mrc_qp_io_free(io);
    }
}

/// Spec: MR-5.4.7 — the consumer destroys the QP: a connected QP says its last
/// word (its latest ACK, once) in a run made here, before [`qp_stop`] takes the QP
/// off the wire.
///
/// # Safety
///
/// `qp` is a live QP of this driver between `qp_start` and `qp_stop`, and the caller
/// is in process context with interrupts enabled.
pub(super) unsafe fn qp_close(qp: *mut raw::ib_qp) {
    // SAFETY: Per the contract the QP is alive.
    let connected = unsafe { qp_of(qp) }.engine.lock().close();
    if connected {
        // SAFETY: Per the contract (`run_qp`'s own).
        unsafe { run_qp(qp, Origin::Work) };
    }
}

/// Asks the QP's work to run now.
///
/// # Safety
///
/// `qp` is a live QP of this driver between `qp_start` and `qp_stop`.
pub(super) unsafe fn qp_kick(qp: *mut raw::ib_qp) {
    // SAFETY: Per the contract the io context is alive.
    unsafe { raw::mrc_qp_io_kick(qp_alloc_io(qp)) };
}

/// What the work item gives the engine: transmission through the device's socket and
/// completion into the QP's CQs.
struct WorkIo<'a> {
    dev: &'a IbDev,
    qp: *mut raw::ib_qp,
    /// The QP's io context if the QP is connected (RC, UC): one destination, whose
    /// route its transmissions take from the context's cache; null for UD.
    route: *mut raw::mrc_qp_io,
    /// CQs with a new completion whose consumer asked to be notified ([send, recv]).
    notify: [bool; 2],
    /// CQs that overflowed.
    overflow: [bool; 2],
    /// ACKs built under the engine lock, sent once it is released
    /// ([`WorkIo::send_acks`]); an skb left here is freed with it.
    acks: HeldAcks,
    /// A packet of at least `steer_bytes` left: the QP's ACKs are steered for a
    /// while (spec MR-10.3.5).
    sent_bulk: bool,
}

/// ACKs one round of a run holds until the engine lock is released: one per path
/// (a round sends at most one ACK per path and a NAK); more go out at once.
const HELD_ACKS: usize = 8;

/// An ACK packet waiting for the engine lock's release (spec MR-10.3.4).
struct HeldAck {
    skb: TxSkb,
    len: usize,
    dgid: [u8; 16],
    src_port: u16,
    ecn: Ecn,
}

/// The ACKs a run holds, oldest first.
///
/// A `WorkIo` is made for every run and most runs hold no ACK, so the slots are left
/// uninitialised until used: an array of `Option`s had all its 448 bytes written on
/// every run, which the emulated CPU of the test VMs copies a byte at a time.
///
/// # Invariants
///
/// `slots[head..len]` are initialised and owned by this value; the others are not.
/// `head <= len <= HELD_ACKS`.
struct HeldAcks {
    head: usize,
    len: usize,
    slots: [core::mem::MaybeUninit<HeldAck>; HELD_ACKS],
}

impl HeldAcks {
    const fn new() -> Self {
        // INVARIANT: No slot is initialised and `head..len` is empty.
        HeldAcks { head: 0, len: 0, slots: [const { core::mem::MaybeUninit::uninit() }; HELD_ACKS] }
    }

    /// Keeps `ack` after those already held, or gives it back if every slot is taken.
    fn push(&mut self, ack: HeldAck) -> Result<(), HeldAck> {
        let Some(slot) = self.slots.get_mut(self.len) else { return Err(ack) };
        slot.write(ack);
        // INVARIANT: Slot `len` was just initialised, so `head..len + 1` is.
        self.len += 1;
        Ok(())
    }

    /// Takes out the oldest held ACK.
    fn pop(&mut self) -> Option<HeldAck> {
        if self.head == self.len {
            // INVARIANT: Nothing is held; every slot may be reused.
            self.head = 0;
            self.len = 0;
            return None;
        }
        let slot = &self.slots[self.head];
        // INVARIANT: Moving `head` past the slot gives up ownership of it before
        // it is read, so it is read once.
        self.head += 1;
        // SAFETY: The slot was in `head..len`, initialised (type invariant).
        Some(unsafe { slot.assume_init_read() })
    }
}

impl Drop for HeldAcks {
    fn drop(&mut self) {
        // Frees the skbs of ACKs never sent.
        while self.pop().is_some() {}
    }
}

impl<'a> WorkIo<'a> {
    /// # Safety
    ///
    /// `qp` is a live QP of this driver between `qp_start` and `qp_stop` for the
    /// life of the result, and `io_ctx` its io context.
    unsafe fn new(dev: &'a IbDev, qp: *mut raw::ib_qp, io_ctx: *mut raw::mrc_qp_io) -> Self {
        // SAFETY: Per the contract the QP is alive.
        let connected = matches!(unsafe { (*qp).qp_type }, raw::ib_qp_type_IB_QPT_RC | raw::ib_qp_type_IB_QPT_UC);
        let route = if connected { io_ctx } else { core::ptr::null_mut() };
        WorkIo { dev, qp, route, notify: [false; 2], overflow: [false; 2], acks: HeldAcks::new(), sent_bulk: false }
    }

    /// Spec: MR-10.3.4 — sends the ACKs the round held: outside the engine lock when
    /// they are the last packets the round built (in a request/response exchange the
    /// receive that sends an ACK then no longer holds the lock the answer's doorbell,
    /// on the other CPU, waits for), else before the next packet (MR-5.4.3). A failed
    /// send is a lost ACK, which the protocol recovers from.
    fn send_acks(&mut self) {
        while let Some(a) = self.acks.pop() {
            // SAFETY: We own the skb; it holds `len <= cap` written bytes.
            unsafe { self.send_skb(&a.dgid, a.src_port, a.ecn, a.skb.into_raw(), a.len) };
        }
    }
    fn cq(&self, recv: bool) -> *mut raw::ib_cq {
        // SAFETY: The QP is alive during the work; ib_core set its CQs before
        // `create_qp`, and a CQ outlives the QPs that use it.
        unsafe { if recv { (*self.qp).recv_cq } else { (*self.qp).send_cq } }
    }

    /// Calls completion and error handlers (after the engine lock is released, since
    /// kernel consumers may post from them).
    fn fire(&self) {
        for (i, recv) in [false, true].into_iter().enumerate() {
            let cq = self.cq(recv);
            if cq.is_null() {
                continue;
            }
            // SAFETY: A live CQ (see `cq`).
            unsafe {
                if self.overflow[i] {
                    raw::mrc_cq_event(cq, raw::ib_event_type_IB_EVENT_CQ_ERR as c_int);
                }
                if self.notify[i] {
                    raw::mrc_cq_notify(cq);
                }
            }
        }
    }
}

/// An skb being filled with one packet: the protocol writes the packet straight
/// into the buffer the network stack sends, instead of into a staging buffer that
/// is then copied (one copy of every payload byte fewer).
///
/// # Invariants
///
/// `skb` is an skb we own, from `mrc_tx_skb_alloc`, with `cap` bytes of tailroom
/// starting at `data`. Those bytes come from the slab allocator and hold whatever it
/// held: initialised memory as far as Rust is concerned, not yet meaningful; a
/// packet is sent only up to the length the protocol reported having written.
pub(crate) struct TxSkb {
    skb: NonNull<raw::sk_buff>,
    data: NonNull<u8>,
    cap: usize,
}

impl TxSkb {
    fn alloc(cap: usize) -> Option<Self> {
        let len = u32::try_from(cap).ok()?;
        let mut data = core::ptr::null_mut();
        // SAFETY: No preconditions; GFP_ATOMIC, so callable under the engine lock.
        let skb = NonNull::new(unsafe { raw::mrc_tx_skb_alloc(len, &mut data) })?;
        match NonNull::new(data) {
            // INVARIANT: The helper reserved `cap` bytes of tailroom at `data`.
            Some(data) => Some(TxSkb { skb, data, cap }),
            None => {
                // SAFETY: Ours, never sent.
                unsafe { raw::mrc_kfree_skb(skb.as_ptr()) };
                None
            }
        }
    }

    /// Gives up ownership of the skb, for a helper that consumes it.
    fn into_raw(self) -> *mut raw::sk_buff {
        let skb = self.skb.as_ptr();
        core::mem::forget(self);
        skb
    }
}

impl core::ops::Deref for TxSkb {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: By the type invariant `cap` bytes at `data` are ours while we own
        // the skb.
        unsafe { core::slice::from_raw_parts(self.data.as_ptr(), self.cap) }
    }
}

impl core::ops::DerefMut for TxSkb {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: As in `deref`; `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.data.as_ptr(), self.cap) }
    }
}

impl Drop for TxSkb {
    fn drop(&mut self) {
        // SAFETY: By the type invariant we own the skb, never sent.
        unsafe { raw::mrc_kfree_skb(self.skb.as_ptr()) };
    }
}

impl WorkIo<'_> {
    /// Spec: MR-10.3.5 — notes a data packet of `bytes` leaving: one of at least
    /// `steer_bytes` has the QP's ACKs steered for a while (see `run_qp`).
    fn note_sent(&mut self, bytes: usize) {
        if !self.sent_bulk {
            let steer = *crate::module_parameters::steer_bytes.value() as usize;
            self.sent_bulk = steer != 0 && bytes >= steer;
        }
    }

    /// Sends `skb`, with `len` more bytes written into its tailroom, to `dgid`.
    ///
    /// # Safety
    ///
    /// `skb` is ours, from `mrc_tx_skb_alloc` or `mrc_tx_skb_frags`, with at least
    /// `len` bytes written at its tail; it is consumed.
    unsafe fn send_skb(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, skb: *mut raw::sk_buff, len: usize) -> bool {
        let tos = match ecn {
            Ecn::NotEct => 0,
            Ecn::Ect0 => 2,
        };
        let Some(d) = crate::engine::ipv4_of(dgid) else {
            let sock6 = self.dev.sock6();
            if sock6.is_null() {
                // SAFETY: Ours (contract), never sent.
                unsafe { raw::mrc_kfree_skb(skb) };
                return false;
            }
            let any = [0u8; 16];
            // SAFETY: The IPv6 socket lives as long as the device's other socket; the
            // helper consumes the skb (caller's contract).
            let ret = unsafe {
                raw::mrc_udp_xmit6_skb(sock6, any.as_ptr(), dgid.as_ptr(), src_port, self.dev.udp_port(), tos,
                    skb, len)
            };
            return ret == 0;
        };
        // SAFETY: The device's socket is open while the device has QPs; `route` is
        // null or the live io context of this connected QP (see `new`), whose route
        // cache the helper uses with bottom halves off; the helper consumes the skb
        // (caller's contract).
        let ret = unsafe {
            raw::mrc_udp_xmit4_skb(
                self.route,
                self.dev.sock(),
                u32::from_ne_bytes(d),
                src_port,
                self.dev.udp_port(),
                tos,
                skb,
                len,
            )
        };
        ret == 0
    }
}

impl Io for WorkIo<'_> {
    type TxBuf = TxSkb;

    fn tx_buf(&mut self, len: usize) -> Option<TxSkb> {
        TxSkb::alloc(len)
    }

    fn transmit_buf(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, buf: TxSkb, len: usize) -> bool {
        if len > buf.cap {
            return false;
        }
        // Spec: MR-5.4.3 — ACKs built before this packet leave before it.
        self.send_acks();
        self.note_sent(len);
        // SAFETY: We own the skb; it holds `len <= cap` written bytes in its tailroom.
        unsafe { self.send_skb(dgid, src_port, ecn, buf.into_raw(), len) }
    }

    fn transmit_ack(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, buf: TxSkb, len: usize) -> bool {
        if len > buf.cap {
            return false;
        }
        match self.acks.push(HeldAck { skb: buf, len, dgid: *dgid, src_port, ecn }) {
            Ok(()) => true,
            Err(a) => self.transmit_buf(dgid, src_port, ecn, a.skb, len),
        }
    }

    fn sends_pages(&self) -> bool {
        *crate::module_parameters::zero_copy_tx.value() != 0
    }

    fn transmit_pages(&mut self, dgid: &[u8; 16], src_port: u16, ecn: Ecn, header: &[u8], frags: &mut TxFrags) -> bool {
        let bytes = header.len() + frags.bytes;
        let Some(skb) = frags.into_skb(header) else { return false };
        // Spec: MR-5.4.3 — ACKs built before this packet leave before it.
        self.send_acks();
        self.note_sent(bytes);
        // SAFETY: We own the complete skb (headers and fragments already added).
        unsafe { self.send_skb(dgid, src_port, ecn, skb.as_ptr(), 0) }
    }

    fn complete(&mut self, recv: bool, mut wc: crate::cq::Wc, solicited: bool) {
        let cq = self.cq(recv);
        if cq.is_null() {
            return;
        }
        wc.qp_handle = self.qp as usize;
        // SAFETY: A live CQ of this driver (see `cq`).
        match unsafe { cq_of(cq) }.push(wc, solicited) {
            Pushed::Stored { notify } => self.notify[usize::from(recv)] |= notify,
            Pushed::Overflow => self.overflow[usize::from(recv)] = true,
        }
    }
}

fn now() -> Instant {
    // SAFETY: No preconditions.
    Instant(unsafe { raw::mrc_now_ns() })
}

/// Datagrams one run takes from the receive queue before transmitting (bounds the
/// time the engine spinlock is held; the work requeues itself if more are waiting).
const RX_BUDGET: usize = 64;

/// The work item (and short timer) of a QP: runs the QP for its timers and for
/// whatever could not be done where it arrived (see [`run_qp`]).
unsafe extern "C" fn qp_run_cb(owner: *mut c_void) {
    // SAFETY: The work and the timer only run between `qp_start` and `qp_stop` (which
    // cancels both), in process context or softirq.
    unsafe { run_qp(owner.cast(), Origin::Work) };
}

/// The QP's fault work (process context): brings in the memory a run found not
/// resident (spec MR-9.2.5), then runs the QP again, which retries what waited.
unsafe extern "C" fn qp_fault_cb(owner: *mut c_void) {
    let ib: *mut raw::ib_qp = owner.cast();
    // SAFETY: The fault work only runs between `qp_start` and `qp_stop` (which
    // cancels it): the QP, its device and its io context are alive.
    let (dev, qp, io_ctx) = unsafe { (IbDev::from_raw((*ib).device), qp_of(ib), qp_alloc_io(ib)) };
    let Some(fault) = qp.engine.lock().take_fault() else { return };
    // Sleeps (page faults): the engine is not held. The registration the fault
    // holds is let go here, in process context.
    let served = fault.serve();
    // What was refused for it goes back to the receive queue (to be refused again
    // if the memory is still not in).
    // SAFETY: As above.
    unsafe { raw::mrc_qp_io_unpark(io_ctx) };
    match served {
        Ok(()) => dev.data().counters.add(crate::net::Counter::OdpFaultsServed, 1),
        // Out of memory, a range busy for long: run the QP again a little later
        // (it faults again then), not at once, which would spin against this.
        Err(e) if !super::OdpMem::lasting(e) => {
            // SAFETY: As above.
            unsafe { raw::mrc_qp_io_arm(io_ctx, FAULT_RETRY_US, false) };
            return;
        }
        // A lasting failure: the range is marked failed, the access now fails.
        Err(_) => {}
    }
    // SAFETY: As above.
    unsafe { raw::mrc_qp_io_kick(io_ctx) };
}

/// Microseconds before a QP whose fault could not be served for now runs again.
const FAULT_RETRY_US: u64 = 1000;

/// What made a QP run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Its work item (a timer, a kernel consumer's post, an overrun budget).
    Work,
    /// A datagram for it arrived (softirq).
    Received,
    /// Its process rang the doorbell or posted through a command (system call).
    Doorbell,
    /// Its process rang the doorbell of its mapped send ring: the run happens only
    /// if the QP takes sends in its state.
    MappedDoorbell,
}

/// Rounds one run may take before leaving the rest to the work item (bounds the
/// time a softirq or system call spends on one QP; the window bounds it anyway).
const MAX_ROUNDS: u32 = 16;

/// Spec: MR-10.3.3 — where a QP runs keeps each path's packets in order.
///
/// Runs a QP: drains received datagrams into the engine, feeds it posted work,
/// transmits, completes, fires completion handlers, and repeats while a budget ran
/// out; then arms the QP's work for the engine's next timer.
///
/// It runs where the event happened whenever that context may transmit: in the
/// softirq that received a datagram, and in the system call of a process's doorbell.
/// Handing every event to the work item instead costs a scheduler round trip per
/// hop; a worker woken while the CPU busy-polls in user space (as latency tests and
/// most RDMA applications do) waits for the next tick, which made every one-way
/// latency about one jiffy. The work item remains for timers (deadlines under a
/// jiffy, such as an ACK waiting for a reply, run from an hrtimer in softirq), for posts from
/// contexts that may not transmit (IRQs off) and for runs over `MAX_ROUNDS`.
///
/// False, having done nothing, for a [`Origin::MappedDoorbell`] of a QP that does not
/// take sends in its state; true otherwise.
///
/// # Safety
///
/// `ib` is a live QP of this driver between `qp_start` and `qp_stop`, and the caller
/// is in process context with interrupts enabled or in softirq.
unsafe fn run_qp(ib: *mut raw::ib_qp, origin: Origin) -> bool {
    // SAFETY: Per the contract the QP, its device and its io context are alive.
    let (dev, qp, io_ctx) = unsafe { (IbDev::from_raw((*ib).device), qp_of(ib), qp_alloc_io(ib)) };
    let data = dev.data();
    // SAFETY: NULL or a live SRQ of this driver, held by ib_core while the QP exists.
    let srq_ptr = unsafe { (*ib).srq };
    // SAFETY: As above.
    let srq = (!srq_ptr.is_null()).then(|| unsafe { srq_of(srq_ptr) });
    // The engine takes SRQ WQEs as messages arrive (through `sh.srq`).
    let sh = Shared { mrs: &data.mrs, keys: &data.mr_keys, srq };
    if matches!(origin, Origin::Doorbell | Origin::MappedDoorbell) {
        // SAFETY: `io_ctx` is alive (see above).
        unsafe { raw::mrc_qp_io_doorbell_here(io_ctx) };
    }
    let mut rounds = 0;
    loop {
        rounds += 1;
        // SAFETY: Per the contract the QP is between `qp_start` and `qp_stop` for
        // this call, and `io_ctx` is its io context.
        let mut io = unsafe { WorkIo::new(dev, ib, io_ctx) };
        let mut later = LaterCopies::new();
        // Dropped (its datagrams freed) at the end of the round, after the round
        // published its completions and sent its held ACKs.
        let mut spent = SpentSkbs::new();
        let mut again = false;
        let doorbell = matches!(origin, Origin::Doorbell | Origin::MappedDoorbell);
        let ack_clocked = doorbell && rounds == 1;
        let mut ran = {
            let mut eng = qp.engine.lock();
            if origin == Origin::MappedDoorbell && rounds == 1 && !eng.accepts_sends() {
                return false;
            }
            // Read under the lock: runs on two CPUs must hand the engine ordered times.
            let t = now();
            eng.pull_posted(&mut io);
            let mut n = 0;
            loop {
                // A run with copies to make goes to make them once it holds
                // as many as it may; the rest is another CPU's, or its next round's.
                if n == RX_BUDGET || !(later.is_empty() || later.has_room()) {
                    again = true;
                    break;
                }
                // SAFETY: `io_ctx` is alive (see above).
                let skb = unsafe { raw::mrc_qp_io_rx_pop(io_ctx) };
                if skb.is_null() {
                    break;
                }
                n += 1;
                // SAFETY: We own the skb, a UDP datagram the receive path queued;
                // ours to free afterwards, to leave with `later` for its copies, or
                // to keep for the fault work (spec MR-9.2.5: refused for memory not
                // resident, handed in again once it is in; if it cannot be kept the
                // peer resends it).
                unsafe {
                    match hand_in(&mut eng, &sh, &mut io, t, skb, &mut later, n > 1) {
                        Handed::Held => {}
                        Handed::Refused if raw::mrc_qp_io_park(io_ctx, skb) => {}
                        Handed::Refused | Handed::Done => spent.push(skb),
                    }
                }
            }
            // Spec: MR-10.1.3 — until the copies are made, nothing is delivered
            // or completed. A run that is the only one copying runs the engine
            // after its copies instead of now as well (it then finds no other run
            // copying, unless one began meanwhile, which runs it when done); while
            // another run copies, the engine runs now, so that acknowledgements
            // and transmission go on.
            let sole_copier = !later.is_empty() && eng.copies_begin() == 1;
            if sole_copier {
                None
            } else {
                // SAFETY: `io_ctx` is alive (see above).
                let (next, precise, wants) = unsafe { finish_run(&mut eng, &sh, &mut io, t, !again, ack_clocked, io_ctx) };
                Some((t, next, precise, wants))
            }
        };
        // SAFETY: `io_ctx` is alive (see above); `srq_ptr` is the QP's SRQ or NULL.
        unsafe { after_run(&mut io, io_ctx, srq, srq_ptr) };
        if !later.is_empty() {
            // Spec: MR-10.1.3 — the copies, with the engine free for another CPU.
            let (made, failed) = later.copy_all(&sh);
            drop(later);
            data.counters.add(crate::net::Counter::RxUnlockedCopies, made);
            data.counters.add_nonzero(crate::net::Counter::AccessErrors, failed);
            // SAFETY: As for `io` above.
            let mut io = unsafe { WorkIo::new(dev, ib, io_ctx) };
            let mut eng = qp.engine.lock();
            // The last run to finish its copies delivers and completes what
            // waited for them (and for this run's datagrams' ACKs, if any).
            if eng.copies_end() {
                let t = now();
                // SAFETY: `io_ctx` is alive (see above).
                let (next, precise, wants) = unsafe { finish_run(&mut eng, &sh, &mut io, t, !again, false, io_ctx) };
                ran = Some((t, next, precise, wants));
                drop(eng);
                // SAFETY: As above.
                unsafe { after_run(&mut io, io_ctx, srq, srq_ptr) };
            }
        }
        let Some((t, next, precise, wants)) = ran else {
            // Another run's copies are under way: that run runs the engine and
            // arms its timers once they are done.
            if again && rounds < MAX_ROUNDS {
                continue;
            }
            if again {
                // SAFETY: `io_ctx` is alive; kicking our own work from it is allowed.
                unsafe { raw::mrc_qp_io_kick(io_ctx) };
            }
            return true;
        };
        let due = again || next.is_some_and(|when| when <= t);
        if due && rounds < MAX_ROUNDS {
            continue;
        }
        // SAFETY: `io_ctx` is alive; kicking or arming our own work from it is allowed.
        unsafe {
            match next {
                _ if due => raw::mrc_qp_io_kick(io_ctx),
                Some(when) => {
                    raw::mrc_qp_io_arm(io_ctx, (when.as_nanos() - t.as_nanos()).div_ceil(1000), precise)
                }
                None => raw::mrc_qp_io_disarm(io_ctx, wants),
            }
        }
        return true;
    }
}

/// The end of a run under the engine lock: runs the engine (timers, posted work,
/// transmission, completions), publishes what the process's rings consumed,
/// accounts the run, and asks for the fault work if memory was not resident.
/// Returns the engine's next deadline, whether it needs a precise timer, and what
/// the QP's io context wanted when the run ended (see `mrc_qp_io_disarm`).
///
/// # Safety
///
/// `io_ctx` is the live io context of the QP whose engine `eng` is, and `eng` is
/// borrowed from the guard of that QP's engine lock, taken in process context or
/// softirq (so bottom halves are off: the run builds packets in the CPU's staging
/// buffer).
#[allow(clippy::too_many_arguments)]
unsafe fn finish_run(
    eng: &mut crate::engine::Engine,
    sh: &Shared<'_>,
    io: &mut WorkIo<'_>,
    t: Instant,
    rx_drained: bool,
    ack_clocked: bool,
    io_ctx: *mut raw::mrc_qp_io,
) -> (Option<Instant>, bool, core::ffi::c_uint) {
    // SAFETY: The caller holds the QP's engine lock (`eng`), taken in process
    // context (bottom halves off) or in softirq, past the last use of `staging`;
    // no other staging buffer reference is alive in this run.
    let staging = unsafe { super::staging_this_cpu() };
    let next = eng.run(sh, io, staging, t, rx_drained, ack_clocked);
    eng.publish_consumed();
    eng.drain_counters(&io.dev.data().counters);
    eng.account_run(now().as_nanos().saturating_sub(t.as_nanos()));
    // Under the lock: whoever kicks or arms after this knows more than this run
    // (see `mrc_qp_io_disarm`).
    // SAFETY: Per the contract `io_ctx` is alive.
    let wants = unsafe { raw::mrc_qp_io_wants(io_ctx) };
    if eng.has_fault() {
        // Spec: MR-9.2.5 — memory not resident: the fault work brings it in
        // (queued once however often this is asked).
        // SAFETY: As above.
        unsafe { raw::mrc_qp_io_fault(io_ctx) };
    }
    (next, eng.precise_timers(), wants)
}

/// After a run released the engine: sends the ACKs it held, notes a large packet
/// sent (ACK steering), fires completion handlers, raises the SRQ's limit event.
///
/// # Safety
///
/// `io_ctx` is the live io context of the run's QP; `srq_ptr` is its SRQ (NULL if
/// none) and `srq` the driver's view of it.
unsafe fn after_run(io: &mut WorkIo<'_>, io_ctx: *mut raw::mrc_qp_io, srq: Option<&crate::srq::Srq>, srq_ptr: *mut raw::ib_srq) {
    io.send_acks();
    if io.sent_bulk {
        // SAFETY: Per the contract `io_ctx` is alive.
        unsafe { raw::mrc_qp_io_sent_bulk(io_ctx) };
    }
    io.fire();
    if srq.is_some_and(|s| s.take_limit_event()) {
        // SAFETY: Per the contract a live SRQ.
        unsafe { raw::mrc_srq_event(srq_ptr, raw::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED as c_int) };
    }
}

/// The source and destination addresses of a received datagram.
///
/// # Safety
///
/// `skb` is a live UDP datagram skb for the call.
unsafe fn addrs_of(skb: *mut raw::sk_buff) -> crate::engine::IpPair {
    let (mut sa, mut da) = (0u32, 0u32);
    let (mut sa6, mut da6) = ([0u8; 16], [0u8; 16]);
    // SAFETY: Per the contract `skb` is a live UDP datagram.
    unsafe {
        raw::mrc_skb_addrs4(skb, &mut sa, &mut da);
        raw::mrc_skb_addrs6(skb, sa6.as_mut_ptr(), da6.as_mut_ptr());
    }
    if sa != 0 {
        crate::engine::IpPair::V4(sa.to_ne_bytes(), da.to_ne_bytes())
    } else {
        crate::engine::IpPair::V6(sa6, da6)
    }
}

/// Hands one received datagram to the engine, which may leave copies of its
/// payload into pinned memory with `later` (spec MR-10.1.3; the datagram is then
/// `later`'s); [`Handed::Refused`] if memory it needs is not resident (spec
/// MR-9.2.5, kept for the fault work). `pull`: take what the process posted
/// first (not for a run's first datagram: the run just did).
///
/// # Safety
///
/// `skb` is a live UDP datagram skb of the caller's for the call.
unsafe fn hand_in(
    eng: &mut crate::engine::Engine,
    sh: &Shared<'_>,
    io: &mut WorkIo<'_>,
    t: Instant,
    skb: *mut raw::sk_buff,
    later: &mut LaterCopies,
    pull: bool,
) -> Handed {
    // Only a UD QP uses the addresses (the GRH it writes): a connection knows its peer.
    // SAFETY: Per the contract `skb` is a live UDP datagram.
    let from = (!eng.takes_pieces()).then(|| unsafe { addrs_of(skb) });
    let mut pieces = Pieces::new();
    let pieces = eng.takes_pieces().then_some(&mut pieces);
    // SAFETY: As above; the pieces stay valid while we own the skb (this call).
    // The receive callback made the headers linear (`UdpPayload::with_headers`).
    let Some(d) = (unsafe { UdpPayload::of(skb, pieces) }) else {
        if pull {
            eng.pull_posted(io);
        }
        return Handed::Done;
    };
    // Receives the process posted since (a message must not meet an RNR NAK for
    // want of a WQE that is already in the ring).
    if pull {
        eng.pull_posted(io);
    }
    // Only a connection takes pieces in place; a UD datagram is copied whole.
    if eng.takes_pieces() && later.wants(d.len()) {
        // SAFETY: We own `skb` (our contract), whose payload `d` is; on `Held`
        // our caller leaves it to `later`.
        unsafe { later.open(skb, &d) };
    }
    // Given even when it takes nothing: the engine asks it whether every copy is
    // made (a message is delivered only then).
    let refused = d.with_more(|more| {
        let r = Received { bytes: d.first, more, src_port: d.src_port, ce: d.ce, addrs: from };
        eng.on_datagram(sh, io, t, &r, Some(&mut *later))
    });
    later.close(refused)
}

/// Up to `N` received skbs owned together, freed when the list is dropped.
///
/// # Invariants
///
/// `skbs[..n]` are live skbs this list owns.
struct OwnedSkbs<const N: usize> {
    skbs: [*mut raw::sk_buff; N],
    n: usize,
}

impl<const N: usize> OwnedSkbs<N> {
    const fn new() -> Self {
        OwnedSkbs { skbs: [core::ptr::null_mut(); N], n: 0 }
    }

    /// Whether the list holds `N` skbs.
    fn is_full(&self) -> bool {
        self.n == N
    }

    /// Takes `skb`, or gives it back when the list is full.
    ///
    /// # Safety
    ///
    /// `skb` is a live skb the caller owns; once taken, the list owns it.
    unsafe fn push(&mut self, skb: *mut raw::sk_buff) -> core::result::Result<(), *mut raw::sk_buff> {
        let slot = self.skbs.get_mut(self.n).ok_or(skb)?;
        *slot = skb;
        self.n += 1;
        Ok(())
    }

    /// Gives back the skb taken last, which the caller owns again.
    fn pop(&mut self) -> Option<*mut raw::sk_buff> {
        self.n = self.n.checked_sub(1)?;
        self.skbs.get(self.n).copied()
    }
}

impl<const N: usize> Drop for OwnedSkbs<N> {
    fn drop(&mut self) {
        for &skb in self.skbs.get(..self.n).unwrap_or(&[]) {
            // SAFETY: Per the type invariant a live skb we own, freed once (the
            // list ends here).
            unsafe { raw::mrc_kfree_skb(skb) };
        }
    }
}

/// Received datagrams a run has handed in completely, freed when the run's round
/// ends (on drop): freeing one (the skb, its data, their slabs) is then not on the
/// way to the completion it carried, which the round publishes first. Up to
/// `SPENT_SKBS` wait; more are freed at once, so nothing is allocated for them.
struct SpentSkbs(OwnedSkbs<SPENT_SKBS>);

/// Datagrams one round keeps for freeing at its end (a ping-pong's round has one).
const SPENT_SKBS: usize = 4;

impl SpentSkbs {
    fn new() -> Self {
        SpentSkbs(OwnedSkbs::new())
    }

    /// Takes `skb` to free.
    ///
    /// # Safety
    ///
    /// `skb` is a live skb the caller owns and no longer refers to.
    unsafe fn push(&mut self, skb: *mut raw::sk_buff) {
        // SAFETY: Per the contract we own `skb`.
        if let Err(skb) = unsafe { self.0.push(skb) } {
            // SAFETY: Given back, so still ours, and no longer referred to.
            unsafe { raw::mrc_kfree_skb(skb) };
        }
    }
}

// ---------------------------------------------------------------------------------
// Copies after the engine lock (spec MR-10.1.3).

/// Pieces one run may leave for after it released the engine: room for two
/// datagrams of the most pieces a datagram is handed on in (four or more of
/// `rc_mtu=32768`'s eight or nine page fragments, whose 32 KiB copies take a few
/// hundred microseconds under emulation); a little over a kilobyte of stack.
/// (Four datagrams a run made no difference to one QP's stream.)
const LATER_COPIES: usize = 2 * (MAX_PIECES + 1);
/// Received datagrams one run may hold for those copies.
const LATER_SKBS: usize = 8;

/// One copy left for later: `len` bytes at `src` to `va` of the memory `key` names.
#[derive(Clone, Copy)]
struct LaterCopy {
    key: u32,
    need: Need,
    va: u64,
    src: *const u8,
    len: usize,
}

/// Copies into pinned user memory that a run makes after it released the QP's
/// engine, so that another CPU may hand the QP's next datagrams to the engine
/// meanwhile (spec MR-10.1.3): the engine checks each access (key, protection
/// domain, rights, bounds) as it hands a datagram in, and this list keeps what the
/// copy needs, with the received skbs the bytes are in. While a run's copies are
/// under way the engine delivers nothing and completes nothing
/// ([`crate::engine::Engine::copies_begin`]).
///
/// Each copy checks its access again when it is made: a registration that went
/// away meanwhile (deregistered, invalidated) is not written.
///
/// # Invariants
///
/// Each of `copies[..n]` reads `len` bytes at `src` inside the payload of one of
/// `skbs`, which this list owns (frees on drop) and nothing modifies;
/// `open` holds the payload ranges of the datagram being handed in (the last of
/// `skbs` until [`Self::close`]), and `push` takes only bytes inside them.
pub(crate) struct LaterCopies {
    copies: [core::mem::MaybeUninit<LaterCopy>; LATER_COPIES],
    n: usize,
    skbs: OwnedSkbs<LATER_SKBS>,
    /// The datagram being handed in: its payload's pieces and the copies before it.
    open: Option<OpenDatagram>,
    /// The accessor every copy of this run is made as (one QP's).
    by: Option<Accessor>,
    /// Smallest piece left for later (`unlocked_copy_bytes`; 0: none).
    min: usize,
}

/// See [`LaterCopies::open`].
struct OpenDatagram {
    ranges: [(usize, usize); MAX_PIECES + 1],
    n_ranges: usize,
    mark: usize,
}

/// What became of a datagram handed in with a [`LaterCopies`].
enum Handed {
    /// Refused for memory not resident (spec MR-9.2.5): the caller's again.
    Refused,
    /// Nothing of it is left to copy: the caller frees it.
    Done,
    /// Held by the list until its copies are made.
    Held,
}

impl LaterCopies {
    fn new() -> Self {
        LaterCopies {
            copies: [const { core::mem::MaybeUninit::uninit() }; LATER_COPIES],
            n: 0,
            skbs: OwnedSkbs::new(),
            open: None,
            by: None,
            min: *crate::module_parameters::unlocked_copy_bytes.value() as usize,
        }
    }

    /// Nothing is left to copy.
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Whether a datagram of `len` bytes (headers and payload) may leave copies:
    /// it is long enough to hold a piece of `unlocked_copy_bytes`, and there is
    /// room. ACKs and small messages are not opened at all (see [`Self::open`]).
    fn wants(&self, len: usize) -> bool {
        len >= self.min && self.has_room()
    }

    /// Room for all the copies of one more datagram, however many pieces it has.
    fn has_room(&self) -> bool {
        self.min > 0 && self.n + MAX_PIECES + 1 <= LATER_COPIES && !self.skbs.is_full()
    }

    /// Whether `data` may be left for later: at least `unlocked_copy_bytes`, room
    /// left, and inside the payload of the datagram being handed in.
    pub(crate) fn takes(&self, data: &[u8]) -> bool {
        let Some(o) = self.open.as_ref() else { return false };
        let (start, len) = (data.as_ptr() as usize, data.len());
        self.min > 0
            && len >= self.min
            && self.n < LATER_COPIES
            && o.ranges[..o.n_ranges].iter().any(|&(a, l)| start >= a && start + len <= a + l)
    }

    /// Leaves the copy of `data` to `va` of `key` for later; false (nothing kept)
    /// if [`Self::takes`] refuses it or the accessor differs from this run's.
    pub(crate) fn push(&mut self, key: u32, va: u64, need: Need, by: Accessor, data: &[u8]) -> bool {
        if !self.takes(data) || self.by.is_some_and(|b| b != by) {
            return false;
        }
        self.by = Some(by);
        self.copies[self.n].write(LaterCopy { key, need, va, src: data.as_ptr(), len: data.len() });
        self.n += 1;
        true
    }

    /// Notes the datagram `skb` with payload `d` as the one being handed in, and
    /// takes it; with no room for it, opens nothing (no copy is then left for
    /// later, see [`Self::takes`]).
    ///
    /// # Safety
    ///
    /// `skb` is a live skb the caller owns, whose payload `d` describes. The list
    /// owns it from here, and [`Self::close`] gives it back unless it answers
    /// [`Handed::Held`].
    unsafe fn open(&mut self, skb: *mut raw::sk_buff, d: &UdpPayload<'_>) {
        // SAFETY: Per our contract the caller owns `skb` and hands it over.
        if unsafe { self.skbs.push(skb) }.is_err() {
            return;
        }
        let mut o = OpenDatagram { ranges: [(0, 0); MAX_PIECES + 1], n_ranges: 1, mark: self.n };
        o.ranges[0] = (d.first.as_ptr() as usize, d.first.len());
        for p in d.pieces.iter().filter(|p| !p.data.is_null()) {
            if let Some(r) = o.ranges.get_mut(o.n_ranges) {
                *r = (p.data as usize, p.len as usize);
                o.n_ranges += 1;
            }
        }
        self.open = Some(o);
    }

    /// Ends the datagram handed in (opened or not): if the engine `refused` it,
    /// forgets its copies (it is handed in again, or resent); if it left any, holds
    /// it; otherwise gives it back to the caller.
    fn close(&mut self, refused: bool) -> Handed {
        let handed = if refused { Handed::Refused } else { Handed::Done };
        let Some(o) = self.open.take() else { return handed };
        if !refused && self.n > o.mark {
            return Handed::Held;
        }
        self.n = o.mark;
        // The datagram `open` took last: the caller's again.
        self.skbs.pop();
        handed
    }

    /// Makes the copies, each after checking its access again; returns how many
    /// were made and how many found their registration gone (deregistered or
    /// invalidated since: nothing is written for those).
    fn copy_all(&mut self, sh: &Shared<'_>) -> (u64, u64) {
        let Some(by) = self.by else { return (0, 0) };
        let made = self.n as u64;
        let mut failed = 0;
        let mut fault = None;
        for c in &self.copies[..self.n] {
            // SAFETY: The first `n` entries were written by `push`.
            let c = unsafe { c.assume_init() };
            // SAFETY: Per the type invariant `src` is `len` bytes of an skb payload
            // this list owns and nothing modifies.
            let data = unsafe { core::slice::from_raw_parts(c.src, c.len) };
            let r = sh.mrs.access(sh.keys, c.key, by, c.va, c.len, c.need, &mut fault, |m, iova, o| m.write(iova, o, data));
            failed += u64::from(r.is_err());
        }
        self.n = 0;
        (made - failed, failed)
    }
}

/// Most page fragments of a received datagram that are handed on as they are; a
/// datagram with more is linearized. The kernel's default `MAX_SKB_FRAGS` is 17.
const MAX_PIECES: usize = 18;

/// Room for the page fragments of one received datagram, which [`UdpPayload`]
/// describes. Left uninitialized: only the pieces the helper fills are read.
///
/// Kept apart from the payload so that the payload is a few words: it is returned
/// and moved on every received packet, and under emulation each move of a few
/// hundred bytes (a `rep movs`) cost more than the rest of an ACK's handling.
pub(super) struct Pieces([core::mem::MaybeUninit<raw::mrc_piece>; MAX_PIECES]);

impl Pieces {
    pub(super) const fn new() -> Self {
        Pieces([const { core::mem::MaybeUninit::uninit() }; MAX_PIECES])
    }
}

/// What the read helpers returned for one datagram (no borrow: see [`Read::view`]).
#[derive(Clone, Copy)]
struct Read {
    first: *const u8,
    len: u32,
    n_more: usize,
    src_port: u16,
    ce: bool,
}

impl Read {
    /// Reads the payload of `skb`; in pieces into `pieces` if given (with at
    /// least `pull` bytes in the first), else linearized first. `None` if it
    /// cannot be read.
    ///
    /// # Safety
    ///
    /// `skb` is a received UDP datagram skb owned by the caller.
    unsafe fn of(skb: *mut raw::sk_buff, pieces: Option<&mut Pieces>, pull: usize) -> Option<Self> {
        let (mut len, mut sport, mut ce, mut n) = (0u32, 0u16, false, 0u32);
        // SAFETY: Per the contract; `pieces` has room for `MAX_PIECES` entries, of
        // which the helper initializes the first `n`.
        let p = unsafe {
            match pieces {
                Some(buf) => raw::mrc_skb_udp_pieces(
                    skb,
                    pull as u32,
                    &mut len,
                    buf.0.as_mut_ptr().cast(),
                    MAX_PIECES as u32,
                    &mut n,
                    &mut sport,
                    &mut ce,
                ),
                None => raw::mrc_skb_udp_payload(skb, &mut len, &mut sport, &mut ce),
            }
        };
        if p.is_null() {
            return None;
        }
        Some(Read { first: p, len, n_more: (n as usize).min(MAX_PIECES), src_port: sport, ce })
    }

    /// The payload this read found.
    ///
    /// # Safety
    ///
    /// The skb that was read is kept alive and unmodified for `'a`, and `pieces`
    /// is the buffer the read filled (`None` for a read without pieces), not
    /// written since.
    unsafe fn view<'a>(&self, pieces: Option<&'a Pieces>) -> UdpPayload<'a> {
        // SAFETY: The helper returned `len` readable bytes in the skb's linear part,
        // alive while the caller keeps the skb (contract).
        let first = unsafe { core::slice::from_raw_parts(self.first, self.len as usize) };
        let pieces = match pieces {
            // SAFETY: The read initialized the first `n_more` entries of `buf` (at
            // most `MAX_PIECES`); `MaybeUninit<T>` has the layout of `T`.
            Some(buf) => unsafe {
                core::slice::from_raw_parts(buf.0.as_ptr().cast::<raw::mrc_piece>(), self.n_more)
            },
            None => &[],
        };
        UdpPayload { first, pieces, src_port: self.src_port, ce: self.ce }
    }
}

/// The UDP payload of a received datagram, as the skb holds it: a first piece in
/// its linear part (with the headers), then its page fragments.
///
/// # Invariants
///
/// Each of `pieces` describes `len` readable bytes (or is NULL) alive for `'a`.
pub(super) struct UdpPayload<'a> {
    pub(super) first: &'a [u8],
    pieces: &'a [raw::mrc_piece],
    pub(super) src_port: u16,
    pub(super) ce: bool,
}

impl<'a> UdpPayload<'a> {
    /// Reads the payload of `skb`, in pieces into `pieces` if given (else
    /// linearized first). `None` if it cannot be read.
    ///
    /// # Safety
    ///
    /// `skb` is a received UDP datagram skb owned by the caller, who keeps it
    /// alive and unmodified for `'a`.
    pub(super) unsafe fn of(skb: *mut raw::sk_buff, pieces: Option<&'a mut Pieces>) -> Option<Self> {
        match pieces {
            Some(buf) => {
                // SAFETY: Per the contract.
                let r = unsafe { Read::of(skb, Some(&mut *buf), 0) }?;
                // SAFETY: The skb lives for `'a` (contract); `buf` is what `r` filled.
                Some(unsafe { r.view(Some(buf)) })
            }
            // SAFETY: Per the contract; a read without pieces has none to view.
            None => unsafe { Read::of(skb, None, 0).map(|r| r.view(None)) },
        }
    }

    /// Reads the payload of `skb` in pieces, with the packet's headers in the
    /// first: a first piece too short for them (a sender or NIC that put them in
    /// the fragments) is lengthened to [`HEADERS_MAX`] bytes, copied out of the
    /// fragments; one that holds them costs no copy. Returns the payload with
    /// where it goes (the destination QP number, or why its headers are
    /// malformed); `None` if it cannot be read.
    ///
    /// [`HEADERS_MAX`]: crate::proto::wire::HEADERS_MAX
    ///
    /// # Safety
    ///
    /// As for [`Self::of`].
    pub(super) unsafe fn with_headers(
        skb: *mut raw::sk_buff,
        pieces: &'a mut Pieces,
    ) -> Option<(Self, Result<Destination, WireError>)> {
        // SAFETY: Per the contract.
        let mut r = unsafe { Read::of(skb, Some(&mut *pieces), 0) }?;
        // SAFETY: The skb is alive (contract) and `pieces` is what `r` filled; the
        // view ends before `pieces` is written again.
        let mut parsed = unsafe { r.view(Some(pieces)) }.destination();
        if r.n_more > 0 && matches!(parsed, Err(WireError::Truncated)) {
            // SAFETY: Per the contract; pulling may move the bytes `r` pointed at,
            // and `r` is replaced.
            r = unsafe { Read::of(skb, Some(&mut *pieces), crate::proto::wire::HEADERS_MAX) }?;
            // SAFETY: As for the first view.
            parsed = unsafe { r.view(Some(pieces)) }.destination();
        }
        let pieces: &'a Pieces = pieces;
        // SAFETY: The skb lives for `'a` (contract); `pieces` is what `r` filled.
        Some((unsafe { r.view(Some(pieces)) }, parsed))
    }

    /// Where the receive path hands the packet, from its headers (spec MR-3.1.5:
    /// the QP it goes to parses it in full, and counts it if it is malformed;
    /// parsing it here as well cost a second parse of every datagram).
    fn destination(&self) -> Result<Destination, WireError> {
        PacketRepr::route(self.first).map(|r| Destination {
            qpn: r.dest_qpn,
            ack: r.opcode == Opcode::Ack,
            read_len: r.read_len,
            path: r.path_id,
        })
    }

    /// Whether the packet parses in full (the receive path routes on its
    /// headers; this is for a datagram no QP will parse).
    pub(super) fn parses(&self) -> bool {
        self.with_more(|more| PacketRepr::parse_scattered(self.first, more).is_ok())
    }

    /// Bytes of the payload, in all its pieces.
    pub(super) fn len(&self) -> usize {
        self.first.len() + self.pieces.iter().map(|p| p.len as usize).sum::<usize>()
    }

    /// Calls `f` with the payload's pieces after the first, as slices (the array
    /// of them is only built for a datagram that has any).
    pub(super) fn with_more<R>(&self, f: impl FnOnce(&[&'a [u8]]) -> R) -> R {
        if self.pieces.is_empty() {
            return f(&[]);
        }
        let more = self.more();
        f(&more[..self.pieces.len()])
    }

    /// The pieces after the first (empty slices past the last).
    fn more(&self) -> [&'a [u8]; MAX_PIECES] {
        core::array::from_fn(|i| match self.pieces.get(i) {
            Some(p) if !p.data.is_null() => {
                // SAFETY: Per the type invariant the piece is `len` readable bytes
                // (of one of the skb's direct-mapped page fragments) alive for `'a`.
                unsafe { core::slice::from_raw_parts(p.data, p.len as usize) }
            }
            _ => &[][..],
        })
    }
}

/// What the receive path reads of a datagram's parse.
pub(super) struct Destination {
    /// The destination QP number.
    pub(super) qpn: u32,
    /// An acknowledgement (no payload to place).
    pub(super) ack: bool,
    /// The bytes a READ request asks for (0 for other packets).
    pub(super) read_len: u32,
    /// The MRH path id.
    pub(super) path: u8,
}

/// Spec: MR-10.3.5 — where a QP handles a received datagram: a payload of at least
/// `steer_bytes` (the module parameter; 0 steers nothing) is copied on another CPU,
/// and a READ request for as many bytes is answered there; an ACK is handled where
/// the QP handles such packets, or if it has none, where its process rings its
/// doorbell.
pub(super) fn arrival_of(d: &Destination, payload_len: usize) -> c_int {
    let steer = *crate::module_parameters::steer_bytes.value() as usize;
    let arrival = match () {
        _ if steer == 0 => raw::mrc_arrival_MRC_ARRIVAL_HERE,
        _ if d.ack => raw::mrc_arrival_MRC_ARRIVAL_ACK,
        _ if payload_len >= steer || d.read_len as usize >= steer => raw::mrc_arrival_MRC_ARRIVAL_BULK,
        _ => raw::mrc_arrival_MRC_ARRIVAL_HERE,
    };
    arrival as c_int
}

/// Hands a received datagram for `qpn` to its QP (softirq): runs the QP here, or
/// queues the datagram for a run on the CPU `arrival` steers it to (spec
/// MR-10.3.5, [`arrival_of`]). Returns the skb back if no such QP is live.
/// `data_path`: the MRH path id of a data packet (None for an ACK or a multicast
/// copy), which MR-6.3.5's spread of the connection's paths over CPUs counts.
///
/// # Safety
///
/// `skb` is owned by the caller; on `Ok` it is consumed.
pub(super) unsafe fn deliver(
    dev: &IbDev,
    qpn: u32,
    data_path: Option<u8>,
    arrival: c_int,
    skb: *mut raw::sk_buff,
) -> Result<(), *mut raw::sk_buff> {
    let Some(qp) = dev.data().qp_table.lookup(qpn) else { return Err(skb) };
    if let Some(path) = data_path {
        // SAFETY: A live QP (the table invariant, as below); `skb` is ours and
        // live; the UDP receive path is softirq.
        unsafe { note_spread(dev, qp, path, skb) };
    }
    // SAFETY: A live QP (table invariant; we are inside the RCU read section of the
    // UDP receive path, so `qp_stop` waits for us); its io context exists while it is
    // in the table. The UDP receive path is softirq, where `run_qp` may run.
    unsafe {
        let io = qp_alloc_io(qp);
        // Most packets stay here: no call for them.
        if arrival != raw::mrc_arrival_MRC_ARRIVAL_HERE as c_int && raw::mrc_qp_io_rx_steer(io, skb, arrival) {
            dev.data().counters.add(crate::net::Counter::RxSteered, 1);
        } else {
            raw::mrc_qp_io_rx_push(io, skb);
            run_qp(qp, Origin::Received);
        }
    }
    Ok(())
}

/// Spec: MR-6.3.5 — notes the CPU that handles a data packet of path `path` of
/// `qp`'s connection; when the connection's paths crowd one CPU, the path's next
/// ACK asks the peer to move one of them. Only on a link that spreads received
/// packets over CPUs: elsewhere every packet lands on one CPU whatever its port.
///
/// # Safety
///
/// `qp` is a live QP of this driver and `skb` a live received datagram, in the
/// receive softirq.
unsafe fn note_spread(dev: &IbDev, qp: *mut raw::ib_qp, path: u8, skb: *mut raw::sk_buff) {
    // SAFETY: Per the contract the QP is alive.
    let q = unsafe { qp_of(qp) };
    if q.ty != crate::qp::QpType::Rc {
        return;
    }
    // SAFETY: No preconditions (softirq: the CPU cannot change under us).
    let cpu = unsafe { raw::mrc_rx_cpu() };
    // Whether the link spreads, and over how many CPUs, only matters every
    // `CHECK_EVERY` packets: not asked per packet.
    // SAFETY: Per the contract `skb` is live for the call; the CPU count has no
    // preconditions.
    let cpus = || unsafe { if raw::mrc_skb_rx_spread(skb) { raw::mrc_online_cpus() } else { 1 } };
    if let Some(p) = q.rx_spread.note(usize::from(path), cpu as u32, cpus) {
        if q.engine.lock().ask_to_move(p) {
            dev.data().counters.add(crate::net::Counter::MoveRequests, 1);
        }
    }
}

/// Hands a received datagram for the multicast QPN (spec MR-3.6.3) to every QP
/// attached to its destination address: a clone each, the original to the last
/// (softirq). Returns how many QPs took it; the skb is consumed either way (a QP
/// whose clone finds no memory misses it: UD is unreliable).
///
/// # Safety
///
/// `skb` is a received UDP datagram owned by the caller; it is consumed.
pub(super) unsafe fn deliver_multicast(dev: &IbDev, skb: *mut raw::sk_buff) -> usize {
    // SAFETY: Per the contract `skb` is a live UDP datagram.
    let group = unsafe { addrs_of(skb) }.dst_gid();
    let mut qpns = [0u32; crate::mcast::MAX_GROUP_QPS];
    let n = dev.data().mcast.members(&group, &mut qpns);
    if n == 0 {
        // SAFETY: We own the skb.
        unsafe { raw::mrc_kfree_skb(skb) };
        return 0;
    }
    let mut taken = 0;
    for (i, &qpn) in qpns[..n].iter().enumerate() {
        // SAFETY: We own `skb` until the last QP is handed it.
        let copy = if i + 1 == n { skb } else { unsafe { raw::mrc_skb_clone(skb) } };
        if copy.is_null() {
            continue;
        }
        // SAFETY: We own `copy`; on success the QP's queue does.
        // UD: no steering (the copy is at most one MTU, and UD keeps no order).
        match unsafe { deliver(dev, qpn, None, raw::mrc_arrival_MRC_ARRIVAL_HERE as c_int, copy) } {
            Ok(()) => taken += 1,
            // SAFETY: Handed back: still ours.
            Err(c) => unsafe { raw::mrc_kfree_skb(c) },
        }
    }
    taken
}

// ---------------------------------------------------------------------------------
// Posting.

/// Largest inline payload (the device limit).
const INLINE_MAX: usize = crate::qp::MAX_INLINE as usize;

fn sges_of(list: *const raw::ib_sge, n: c_int, out: &mut [Sge; crate::qp::MAX_SGE as usize]) -> Result<usize> {
    let n = usize::try_from(n).map_err(|_| EINVAL)?;
    if n > out.len() {
        return Err(EINVAL);
    }
    for (i, o) in out.iter_mut().take(n).enumerate() {
        // SAFETY: ib_core passes `num_sge` valid entries.
        let s = unsafe { &*list.add(i) };
        *o = Sge { addr: s.addr, length: s.length, lkey: s.lkey };
    }
    Ok(n)
}

/// Copies inline data named by `sges` into `buf`: user addresses for user QPs (we
/// run in the posting process), kernel addresses for kernel QPs.
fn copy_inline(user: bool, sges: &[Sge], buf: &mut [u8; INLINE_MAX]) -> Result<usize> {
    let mut at = 0usize;
    for s in sges {
        let n = s.length as usize;
        let dst = buf.get_mut(at..at + n).ok_or(EINVAL)?;
        if user {
            // SAFETY: `dst` is writable for `n` bytes; copy_from_user checks the source.
            let left = unsafe { raw::mrc_copy_from_user(dst.as_mut_ptr().cast(), s.addr, n) };
            if left != 0 {
                return Err(EFAULT);
            }
        } else {
            // SAFETY: Kernel consumers pass kernel virtual addresses of `n` readable
            // bytes for inline data (ib_verbs contract for IB_SEND_INLINE).
            unsafe { core::ptr::copy_nonoverlapping(s.addr as usize as *const u8, dst.as_mut_ptr(), n) };
        }
        at += n;
    }
    Ok(at)
}

/// Decodes one send work request (outside the engine lock: copying inline data from
/// user memory may fault and sleep). `sges` and `inline_buf` hold what it refers to.
///
/// # Safety
///
/// `w` is a valid send WR of the QP's type as ib_core builds them (the containing
/// `ib_rdma_wr`/`ib_atomic_wr`/`ib_ud_wr` matches the opcode and QP type).
unsafe fn decode_send<'a>(
    ib: *mut raw::ib_qp,
    w: &raw::ib_send_wr,
    sges: &'a mut [Sge; crate::qp::MAX_SGE as usize],
    inline_buf: &'a mut [u8; INLINE_MAX],
) -> Result<SendRequest<'a>> {
    let flags = w.send_flags as u32;
    // Memory operations of kernel consumers (fast-registration MRs): executed by
    // the engine in send-queue order, never sent.
    let local = match w.opcode {
        raw::ib_wr_opcode_IB_WR_REG_MR => {
            // SAFETY: REG_MR WRs are embedded in an `ib_reg_wr` (first member).
            let x = unsafe { &*(w as *const raw::ib_send_wr).cast::<raw::ib_reg_wr>() };
            // SAFETY: `ib` is alive, and so is its device.
            let dev = unsafe { IbDev::from_raw((*ib).device) };
            if x.mr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: A live MR of this driver (the consumer owns it and does not map
            // it while posting its REG_MR).
            unsafe { super::verbs::stage_fast_reg(dev, x.mr)? };
            Some(LocalOp::RegMr { key: x.key, access: x.access as u32 })
        }
        // SAFETY: `ex` is a plain 32-bit union.
        raw::ib_wr_opcode_IB_WR_LOCAL_INV => Some(LocalOp::LocalInv { key: unsafe { w.ex.invalidate_rkey } }),
        _ => None,
    };
    if let Some(op) = local {
        // SAFETY: `wr_id` is the active member for verbs consumers.
        let wr_id = unsafe { w.__bindgen_anon_1.wr_id };
        let has = |f: u32| flags & f != 0;
        return Ok(SendRequest::local(wr_id, has(raw::ib_send_flags_IB_SEND_SIGNALED as u32), has(raw::ib_send_flags_IB_SEND_FENCE as u32), op));
    }
    let n = sges_of(w.sg_list, w.num_sge, sges)?;
    let sges = &sges[..n];
    let op = match w.opcode {
        raw::ib_wr_opcode_IB_WR_SEND => WrOpcode::Send,
        raw::ib_wr_opcode_IB_WR_SEND_WITH_IMM => WrOpcode::SendImm,
        raw::ib_wr_opcode_IB_WR_SEND_WITH_INV => WrOpcode::SendInv,
        raw::ib_wr_opcode_IB_WR_RDMA_WRITE => WrOpcode::Write,
        raw::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM => WrOpcode::WriteImm,
        raw::ib_wr_opcode_IB_WR_RDMA_READ => WrOpcode::Read,
        raw::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCas,
        raw::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFaa,
        raw::ib_wr_opcode_IB_WR_ATOMIC_WRITE => WrOpcode::AtomicWrite,
        _ => return Err(EINVAL),
    };
    // SAFETY: `ex` is a plain 32-bit union.
    let ex = unsafe { w.ex.imm_data };
    let imm = match op {
        WrOpcode::SendInv => ex,
        _ => u32::from_be(ex),
    };
    let inline = if flags & raw::ib_send_flags_IB_SEND_INLINE as u32 != 0 {
        // SAFETY: `ib` is alive; `uobject` tells user QPs from kernel ones.
        let user = unsafe { !(*ib).uobject.is_null() };
        let n = copy_inline(user, sges, inline_buf)?;
        Some(&inline_buf[..n])
    } else {
        None
    };
    // SAFETY: `ib` is alive.
    let ud_qp = matches!(unsafe { (*ib).qp_type }, raw::ib_qp_type_IB_QPT_UD | raw::ib_qp_type_IB_QPT_GSI);
    let mut r = SendRequest {
        // SAFETY: `wr_id` is the active member for verbs consumers (a kernel
        // consumer's `wr_cqe` pointer is carried the same way, as 64 bits).
        wr_id: unsafe { w.__bindgen_anon_1.wr_id },
        op,
        signaled: flags & raw::ib_send_flags_IB_SEND_SIGNALED as u32 != 0,
        solicited: flags & raw::ib_send_flags_IB_SEND_SOLICITED as u32 != 0,
        fence: flags & raw::ib_send_flags_IB_SEND_FENCE as u32 != 0,
        sges,
        inline,
        remote_va: 0,
        rkey: 0,
        imm,
        compare: 0,
        swap_add: 0,
        flush_len: 0,
        ud: None,
        local: None,
    };
    if ud_qp {
        // SAFETY: UD send WRs are embedded in an `ib_ud_wr` (first member).
        let u = unsafe { &*(w as *const raw::ib_send_wr).cast::<raw::ib_ud_wr>() };
        if u.ah.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: A live AH of this driver (ib_core holds it for the call).
        let dgid = unsafe { ah_dgid(u.ah) };
        r.ud = Some(UdDest { dgid, qpn: u.remote_qpn, qkey: u.remote_qkey });
    } else {
        match op {
            WrOpcode::Write | WrOpcode::WriteImm | WrOpcode::Read | WrOpcode::AtomicWrite => {
                // SAFETY: RDMA WRs, and ATOMIC_WRITE (its 8 bytes in the SGEs, as
                // rxe takes them), are embedded in an `ib_rdma_wr` (first member).
                let x = unsafe { &*(w as *const raw::ib_send_wr).cast::<raw::ib_rdma_wr>() };
                r.remote_va = x.remote_addr;
                r.rkey = x.rkey;
            }
            WrOpcode::AtomicCas | WrOpcode::AtomicFaa => {
                // SAFETY: Atomic WRs are embedded in an `ib_atomic_wr` (first member).
                let x = unsafe { &*(w as *const raw::ib_send_wr).cast::<raw::ib_atomic_wr>() };
                r.remote_va = x.remote_addr;
                r.rkey = x.rkey;
                (r.compare, r.swap_add) = atomic_operands(op, x.compare_add, x.swap);
            }
            _ => {}
        }
    }
    Ok(r)
}

pub(super) unsafe extern "C" fn post_send_cb(
    ib: *mut raw::ib_qp,
    wr: *const raw::ib_send_wr,
    bad: *mut *const raw::ib_send_wr,
) -> c_int {
    // SAFETY: ib_core calls post ops on live QPs of this driver.
    let qp = unsafe { qp_of(ib) };
    let mut ret = 0;
    if qp.mapped {
        // The doorbell of a QP whose process posts into its mapped send ring: a
        // post with no work requests, in a sending state (checked by the run, under
        // the engine lock it takes anyway). Requests passed here as well would
        // overtake those in the ring.
        // SAFETY: Live QP; a doorbell is a system call of the owning process
        // (process context, interrupts enabled).
        let ret = if !wr.is_null() || !unsafe { run_qp(ib, Origin::MappedDoorbell) } {
            EINVAL.to_errno()
        } else {
            // SAFETY: A live QP's device.
            let dev = unsafe { IbDev::from_raw((*ib).device) };
            dev.data().counters.add(crate::net::Counter::Doorbells, 1);
            0
        };
        if ret != 0 && !bad.is_null() {
            // SAFETY: Caller-provided out pointer.
            unsafe { *bad = wr };
        }
        return ret;
    }
    // SAFETY: `ib` is alive; `uobject` tells a process's QP from a kernel one.
    let user = unsafe { !(*ib).uobject.is_null() };
    {
        let mut cur = wr;
        let mut sges = [Sge::default(); crate::qp::MAX_SGE as usize];
        let mut inline_buf = [0u8; INLINE_MAX];
        while !cur.is_null() {
            if user {
                count_cmd(ib, crate::net::Counter::CmdPosts);
            }
            // SAFETY: A valid list of WRs built by the caller.
            let w = unsafe { &*cur };
            // SAFETY: As above; ib_core/uverbs build WRs matching opcode and QP type.
            let r = unsafe { decode_send(ib, w, &mut sges, &mut inline_buf) }
                .and_then(|req| qp.engine.lock().post_send(&req));
            if let Err(e) = r {
                ret = e.to_errno();
                if !bad.is_null() {
                    // SAFETY: Caller-provided out pointer.
                    unsafe { *bad = cur };
                }
                break;
            }
            cur = w.next;
        }
    }
    // SAFETY: Live QP. A process posts from its system call (process context); a
    // kernel consumer may post from any context, including with interrupts off and
    // from inside its completion handler, which `run_qp` calls: its posts go to the
    // work item.
    unsafe {
        if user {
            run_qp(ib, Origin::Doorbell);
        } else {
            qp_kick(ib);
        }
    }
    ret
}

/// Counts a data-path command a process issued on one of QP `ib`'s device.
fn count_cmd(ib: *mut raw::ib_qp, c: crate::net::Counter) {
    // SAFETY: Callers pass a live QP; its device outlives it.
    let dev = unsafe { IbDev::from_raw((*ib).device) };
    dev.data().counters.add(c, 1);
}

/// Posts a list of receive WRs through `post` (one WR: its `wr_id` and SGEs),
/// stopping at the first refusal, which it reports through `bad` as verbs requires.
///
/// # Safety
///
/// `wr` is a valid list of receive WRs and `bad` NULL or writable, for the call.
unsafe fn post_recv_list(
    wr: *const raw::ib_recv_wr,
    bad: *mut *const raw::ib_recv_wr,
    mut post: impl FnMut(u64, &[Sge]) -> Result,
) -> c_int {
    let mut cur = wr;
    let mut sges = [Sge::default(); crate::qp::MAX_SGE as usize];
    while !cur.is_null() {
        // SAFETY: A valid list of WRs built by the caller.
        let w = unsafe { &*cur };
        let r = sges_of(w.sg_list, w.num_sge, &mut sges)
            // SAFETY: `wr_id` is the active member for verbs consumers.
            .and_then(|n| post(unsafe { w.__bindgen_anon_1.wr_id }, &sges[..n]));
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: Caller-provided out pointer.
                unsafe { *bad = cur };
            }
            return e.to_errno();
        }
        cur = w.next;
    }
    0
}

pub(super) unsafe extern "C" fn post_recv_cb(
    ib: *mut raw::ib_qp,
    wr: *const raw::ib_recv_wr,
    bad: *mut *const raw::ib_recv_wr,
) -> c_int {
    // SAFETY: ib_core calls post ops on live QPs of this driver.
    let qp = unsafe { qp_of(ib) };
    // SAFETY: `ib` is alive. A QP on an SRQ has no receive queue of its own, and
    // one whose process posts into a mapped ring takes nothing through here.
    let no_own_rq = unsafe { !(*ib).srq.is_null() } || qp.mapped;
    // SAFETY: `ib` is alive; `uobject` tells a process's QP from a kernel one.
    let user = unsafe { !(*ib).uobject.is_null() };
    // SAFETY: ib_core passes a valid WR list and out pointer.
    let ret = unsafe {
        post_recv_list(wr, bad, |wr_id, sges| {
            if no_own_rq {
                return Err(EINVAL);
            }
            if user {
                count_cmd(ib, crate::net::Counter::CmdPosts);
            }
            qp.engine.lock().post_recv(wr_id, sges)
        })
    };
    // SAFETY: Live QP.
    unsafe { qp_kick(ib) };
    ret
}

pub(super) unsafe extern "C" fn post_srq_recv_cb(
    ib: *mut raw::ib_srq,
    wr: *const raw::ib_recv_wr,
    bad: *mut *const raw::ib_recv_wr,
) -> c_int {
    // SAFETY: ib_core calls post ops on live SRQs of this driver.
    let srq = unsafe { srq_of(ib) };
    // Attached QPs take WQEs when a message arrives that needs one (a sender that met
    // an empty queue retries after its RNR timer).
    // SAFETY: A live SRQ: its device is alive; `uobject` tells a process's SRQ.
    let (dev, user) = unsafe { (IbDev::from_raw((*ib).device), !(*ib).uobject.is_null()) };
    // SAFETY: ib_core passes a valid WR list and out pointer.
    unsafe {
        post_recv_list(wr, bad, |wr_id, sges| {
            if user {
                dev.data().counters.add(crate::net::Counter::CmdPosts, 1);
            }
            srq.post_recv(wr_id, sges)
        })
    }
}
