// SPDX-License-Identifier: GPL-2.0

//! Memory regions as the data path sees them: the per-device table from memory key
//! to registration (protection domain, access rights, address range, pinned pages),
//! and the checks every access passes before a byte moves (spec MR-9.2: key, PD,
//! permission, bounds; any failure is an access error the core turns into a NAK or
//! a local protection error).
//!
//! Memory windows (spec MR-9.2.4) live in the same table, under keys from the same
//! space: an entry whose backing is a [`Window`] grants remote access, with its own
//! rights, to part of a region it names by key. A region with windows bound to it
//! cannot be deregistered, so a window's region is always the one it was bound to.
//!
//! A region registered with `IB_ACCESS_ON_DEMAND` is backed by [`OdpMem`]: an
//! access that finds part of it not resident is a [`MemError::Fault`] (spec
//! MR-9.2.5), and the check notes where ([`FaultAt`]) for the QP's fault work.
//!
//! The table's lock is held while bytes are copied, so deregistration (which takes
//! the entry out under the same lock before unpinning the pages) can never free
//! memory that a copy is using. Copies hold it for reading, so the QPs of a device
//! copy into and out of their regions in parallel; changes to the table (and
//! atomics, which must not interleave with each other) hold it alone.

use crate::ffi::{KernelVa, OdpMem, Umem};
use crate::ids::IdTable;
use crate::proto::MemError;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

/// `IB_ACCESS_LOCAL_WRITE`.
pub(crate) const ACCESS_LOCAL_WRITE: u32 = 1;
/// `IB_ACCESS_REMOTE_WRITE`.
pub(crate) const ACCESS_REMOTE_WRITE: u32 = 2;
/// `IB_ACCESS_REMOTE_READ`.
pub(crate) const ACCESS_REMOTE_READ: u32 = 4;
/// `IB_ACCESS_REMOTE_ATOMIC`.
pub(crate) const ACCESS_REMOTE_ATOMIC: u32 = 8;
/// `IB_ACCESS_MW_BIND`: memory windows may be bound to the region.
pub(crate) const ACCESS_MW_BIND: u32 = 16;
/// `IB_ZERO_BASED`: addresses are offsets into the window (not offered).
pub(crate) const ACCESS_ZERO_BASED: u32 = 32;
/// `IB_ACCESS_FLUSH_GLOBAL`.
pub(crate) const ACCESS_FLUSH_GLOBAL: u32 = 256;
/// `IB_ACCESS_FLUSH_PERSISTENT`.
pub(crate) const ACCESS_FLUSH_PERSISTENT: u32 = 512;
/// `IB_ACCESS_ON_DEMAND`: pages are brought in as accesses need them.
pub(crate) const ACCESS_ON_DEMAND: u32 = 64;
/// The rights that make a registration writable (ib_core's `ib_access_writable`).
const WRITABLE: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC | ACCESS_MW_BIND;

/// Identity of a protection domain (the address of its `ib_pd`; compared, never
/// dereferenced).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct PdId(pub(crate) usize);

/// A QP's identity for the memory windows it binds: unlike its number, never
/// reused while the module is loaded, so a window bound by a destroyed QP never
/// opens to a new QP that inherits the number.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct QpId(u64);

impl QpId {
    /// No QP: an access by a protection domain itself (`ibv_advise_mr`).
    pub(crate) const NONE: QpId = QpId(0);

    /// An identity no other QP has had.
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        QpId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Who makes an access: a QP, by its protection domain and identity.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Accessor {
    pub(crate) pd: PdId,
    pub(crate) qp: QpId,
}

/// A memory window (`ibv_alloc_mw`): while bound, its entry's range, rights and key
/// give remote access to part of a region of the same PD (spec MR-9.2.4).
pub(crate) struct Window {
    /// Type 2 windows are bound by a work request, reachable only through the QP
    /// that bound them, and unbound by invalidation (LOCAL_INV, SEND_INV). Type 1
    /// windows are bound by `ibv_bind_mw` and unbound by binding zero bytes.
    pub(crate) type2: bool,
    /// The key of the region a valid window is bound to (which counts it in
    /// [`MrEntry::windows`]).
    region: u32,
    /// Type 2: the QP that bound it.
    qp: QpId,
}

impl Window {
    /// A window of `pd` as allocated: bound to nothing.
    pub(crate) fn entry(pd: PdId, type2: bool) -> MrEntry {
        let w = Window { type2, region: 0, qp: QpId::NONE };
        MrEntry { key: 0, pd, access: 0, iova: 0, length: 0, mem: Backing::Window(w), valid: false, windows: 0 }
    }
}

/// A memory window bind as posted (`IBV_WR_BIND_MW`, `ibv_bind_mw`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bind {
    /// The window's key as its consumer knows it (the one it was last bound
    /// under, or allocated with), and the key it has once bound (same slot).
    pub(crate) window: u32,
    pub(crate) new_key: u32,
    /// The region's L_Key, the range of it and the `IB_ACCESS_*` rights granted.
    pub(crate) region: u32,
    pub(crate) addr: u64,
    pub(crate) length: u64,
    pub(crate) access: u32,
}

/// One registration.
pub(crate) struct MrEntry {
    /// The full key (slot and salt), checked on every lookup.
    pub(crate) key: u32,
    pub(crate) pd: PdId,
    /// `IB_ACCESS_*` flags given at registration.
    pub(crate) access: u32,
    /// First virtual address the consumer uses for this region.
    pub(crate) iova: u64,
    pub(crate) length: u64,
    /// Where the bytes are.
    pub(crate) mem: Backing,
    /// Accesses may use it. Always for ordinary MRs; a fast-registration MR is
    /// valid between a REG_MR and the next (local or remote) invalidation; a
    /// window while bound.
    pub(crate) valid: bool,
    /// Memory windows bound to this region.
    pub(crate) windows: u32,
}

/// Largest page list of a fast-registration MR (`max_fast_reg_page_list_len`).
pub(crate) const MAX_FRMR_PAGES: u32 = 512;

/// The page list of a fast-registration MR: kernel pages named by their kernel
/// virtual addresses (a software device's DMA addresses, see [`KernelVa`]).
/// Storage for both lists is allocated with the MR, so registering (which runs
/// on the data path) never allocates.
pub(crate) struct PageList {
    /// The registration in force: `n` pages of `page_size` bytes.
    pages: KVec<u64>,
    n: usize,
    page_size: u64,
    /// What the consumer mapped (`ib_map_mr_sg`) and posted a REG_MR for, taken
    /// over when the REG_MR executes.
    staged: KVec<u64>,
    staged_n: usize,
    staged_page_size: u64,
    staged_iova: u64,
    staged_length: u64,
    va: KernelVa,
}

impl PageList {
    /// Room for `max` pages in each list.
    pub(crate) fn new(max: u32, va: KernelVa) -> Result<Self> {
        let n = max as usize;
        Ok(Self {
            pages: KVec::from_elem(0u64, n, GFP_KERNEL)?,
            n: 0,
            page_size: 0,
            staged: KVec::from_elem(0u64, n, GFP_KERNEL)?,
            staged_n: 0,
            staged_page_size: 0,
            staged_iova: 0,
            staged_length: 0,
            va,
        })
    }

    /// Calls `f(kernel address, range of the buffer)` for each piece of
    /// `[offset, offset + len)` of the registration, page by page; false if the
    /// range leaves the page list.
    fn walk(&self, iova: u64, offset: u64, len: usize, mut f: impl FnMut(u64, core::ops::Range<usize>) -> bool) -> bool {
        let ps = self.page_size;
        if ps == 0 {
            return len == 0;
        }
        // Page addresses are aligned to the page size; the registration starts
        // `iova % page_size` bytes into the first page.
        let mut at = iova % ps + offset;
        let mut done = 0usize;
        while done < len {
            let Some(&page) = self.pages.get(..self.n).and_then(|p| p.get((at / ps) as usize)) else {
                return false;
            };
            let in_page = at % ps;
            let chunk = ((ps - in_page) as usize).min(len - done);
            if !f(page + in_page, done..done + chunk) {
                return false;
            }
            done += chunk;
            at += chunk as u64;
        }
        true
    }
}

/// Memory an access found not resident (spec MR-9.2.5): what the QP's fault work
/// brings in before the access is tried again. Holds the registration, so it must
/// be dropped in process context (the fault work takes it there).
pub(crate) struct FaultAt {
    mem: Arc<OdpMem>,
    offset: u64,
    /// What the access needs, and what is brought in if possible.
    len: u64,
    ahead: u64,
    write: bool,
}

/// Bytes a fault brings in at least (from the faulting byte on, within the
/// region): a message into cold memory then costs one fault, not one per packet.
const FAULT_AHEAD: u64 = 128 << 10;

impl FaultAt {
    /// Brings the memory in (process context; sleeps). A lasting failure
    /// ([`OdpMem::lasting`]) leaves the range marked failed, so the access that
    /// is tried again fails instead of faulting.
    pub(crate) fn serve(self) -> Result {
        if self.ahead > self.len && self.mem.fault_ahead(self.offset, self.ahead, self.write).is_ok() {
            return Ok(());
        }
        self.mem.fault_in(self.offset, self.len, self.write, true)
    }
}

/// The memory behind a registration.
pub(crate) enum Backing {
    /// Pinned user pages, addressed by offset into the registration.
    User(Umem),
    /// User pages brought in on demand (`IB_ACCESS_ON_DEMAND`), by offset into the
    /// registration.
    Odp(Arc<OdpMem>),
    /// Kernel virtual memory (the DMA MR of kernel consumers; `iova` 0, so the
    /// offset is the kernel address).
    Kernel(KernelVa),
    /// Kernel pages of a fast-registration MR (`iova` is the registration's).
    Pages(PageList),
    /// A memory window: the memory is its region's.
    Window(Window),
    /// Nothing reachable (tests).
    #[allow(dead_code)]
    None,
}

/// `Ok` if a copy moved every byte, else an access error.
fn moved(all: bool) -> Result<(), MemError> {
    if all { Ok(()) } else { Err(MemError::Access) }
}

impl Backing {
    /// Copies out of the registration at `offset`: an access error if not all
    /// bytes exist, a fault if they are not resident (copying nothing).
    pub(crate) fn read(&self, iova: u64, offset: u64, out: &mut [u8]) -> Result<(), MemError> {
        match self {
            Backing::User(u) => moved(u.read(offset, out)),
            Backing::Odp(o) => o.read(offset, out),
            Backing::Kernel(k) => moved(k.read(offset, out)),
            Backing::Pages(p) => moved(p.walk(iova, offset, out.len(), |va, r| p.va.read(va, &mut out[r]))),
            Backing::Window(_) | Backing::None => Err(MemError::Access),
        }
    }

    /// Takes references to the pages behind `len` bytes at `offset` into `frags`
    /// (zero-copy transmit); an error, taking nothing, where pages are not to be
    /// sent by reference (kernel memory is copied; on-demand pages could change
    /// under a packet in flight) or do not fit `frags`.
    pub(crate) fn take_pages(&self, _iova: u64, offset: u64, len: usize, frags: &mut crate::ffi::TxFrags) -> Result<(), MemError> {
        match self {
            Backing::User(u) => moved(u.take_pages(offset, len, frags)),
            Backing::Odp(_) | Backing::Kernel(_) | Backing::Pages(_) | Backing::Window(_) | Backing::None => {
                Err(MemError::Access)
            }
        }
    }

    /// Pinned user pages: a copy into them may be made after the engine is
    /// released ([`crate::ffi::LaterCopies`]); the others are copied at once
    /// (on-demand pages may fault, kernel memory is not the bulk path).
    pub(crate) fn pinned(&self) -> bool {
        matches!(self, Backing::User(_))
    }

    /// Copies into the registration at `offset`: an access error if not all bytes
    /// fit, a fault if they are not resident (copying nothing).
    pub(crate) fn write(&self, iova: u64, offset: u64, data: &[u8]) -> Result<(), MemError> {
        match self {
            Backing::User(u) => moved(u.write(offset, data)),
            Backing::Odp(o) => o.write(offset, data),
            Backing::Kernel(k) => moved(k.write(offset, data)),
            Backing::Pages(p) => moved(p.walk(iova, offset, data.len(), |va, r| p.va.write(va, &data[r]))),
            Backing::Window(_) | Backing::None => Err(MemError::Access),
        }
    }
}

/// What an access intends to do; each needs one `IB_ACCESS_*` right (local reads
/// need none).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Need {
    LocalRead,
    LocalWrite,
    RemoteRead,
    RemoteWrite,
    RemoteAtomic,
}

impl Need {
    fn is_local(self) -> bool {
        matches!(self, Need::LocalRead | Need::LocalWrite)
    }

    /// The access stores into the memory.
    fn writes(self) -> bool {
        matches!(self, Need::LocalWrite | Need::RemoteWrite | Need::RemoteAtomic)
    }

    fn right(self) -> u32 {
        match self {
            Need::LocalRead => 0,
            Need::LocalWrite => ACCESS_LOCAL_WRITE,
            Need::RemoteRead => ACCESS_REMOTE_READ,
            Need::RemoteWrite => ACCESS_REMOTE_WRITE,
            Need::RemoteAtomic => ACCESS_REMOTE_ATOMIC,
        }
    }
}

/// The byte offset of `[va, va + len)` inside `e`, if the range lies within it.
fn offset_in(e: &MrEntry, va: u64, len: u64) -> Option<u64> {
    let off = va.checked_sub(e.iova)?;
    let end = off.checked_add(len)?;
    (end <= e.length).then_some(off)
}

/// The memory regions of one device, indexed by the slot of their key.
#[pin_data]
pub(crate) struct MrTable {
    /// One entry per key slot. Read-held by the data path while it checks an
    /// access and copies (no sleeping: the copies map pages atomically);
    /// write-held to change an entry: by verbs calls, by posting a REG_MR (which
    /// may happen in softirq) or a local invalidation, and by atomics.
    #[pin]
    slots: crate::ffi::RwLockBh<KVVec<Option<MrEntry>>>,
}

impl MrTable {
    /// A table with `n` slots, allocated now so that registration never resizes it.
    pub(crate) fn new(n: usize) -> Result<impl PinInit<Self, Error>> {
        let mut v = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            v.push(None, GFP_KERNEL)?;
        }
        Ok(try_pin_init!(Self { slots <- crate::ffi::new_rwlock_bh!(v, "metaroce_mrs") }? Error))
    }

    /// Publishes a registration under its key.
    pub(crate) fn insert(&self, keys: &IdTable, e: MrEntry) -> Result {
        let slot = keys.slot_of(e.key).ok_or(EINVAL)?;
        let mut s = self.slots.write();
        let cell = s.get_mut(slot).ok_or(EINVAL)?;
        *cell = Some(e);
        Ok(())
    }

    /// Takes a registration out; once this returns no access can reach it. The
    /// caller drops it (unpinning the pages) outside the lock. `EBUSY`, leaving
    /// it in place, while memory windows are bound to it (verbs: deregistering
    /// such a region fails).
    pub(crate) fn remove(&self, keys: &IdTable, key: u32) -> Result<Option<MrEntry>> {
        let Some(slot) = keys.slot_of(key) else { return Ok(None) };
        let mut s = self.slots.write();
        let Some(cell) = s.get_mut(slot) else { return Ok(None) };
        match cell {
            Some(e) if e.key == key && e.windows > 0 => Err(EBUSY),
            Some(e) if e.key == key => Ok(cell.take()),
            _ => Ok(None),
        }
    }

    /// Takes the memory window in `key`'s slot out (whatever key it was last
    /// bound under), unbinding it first.
    pub(crate) fn remove_window(&self, keys: &IdTable, key: u32) -> Option<MrEntry> {
        let slot = keys.slot_of(key)?;
        let mut s = self.slots.write();
        if !matches!(s.get(slot), Some(Some(MrEntry { mem: Backing::Window(_), .. }))) {
            return None;
        }
        Self::unbind(&mut s, keys, slot);
        s.get_mut(slot)?.take()
    }

    /// Marks the window in `slot` unbound, releasing its region.
    fn unbind(slots: &mut [Option<MrEntry>], keys: &IdTable, slot: usize) {
        let Some(Some(e)) = slots.get_mut(slot) else { return };
        let Backing::Window(w) = &e.mem else { return };
        if !core::mem::replace(&mut e.valid, false) {
            return;
        }
        let region = w.region;
        if let Some(Some(r)) = keys.slot_of(region).and_then(|i| slots.get_mut(i)) {
            if r.key == region {
                r.windows = r.windows.saturating_sub(1);
            }
        }
    }

    /// Executes a memory window bind posted by `by` (spec MR-9.2.4). The checks
    /// are verbs': the window's current key; the window and the region belong to
    /// the QP's PD; a type 2
    /// window is not bound already and gets a range of at least one byte; a zero
    /// length unbinds a type 1 window; the region (not a fast-registration one,
    /// whose key changes under it) grants `IB_ACCESS_MW_BIND`,
    /// and local write if the window is to grant remote write or atomics; the
    /// range lies inside the region; the new key names the same slot.
    pub(crate) fn bind(&self, keys: &IdTable, b: &Bind, by: Accessor) -> Result<(), MemError> {
        let slot = keys.slot_of(b.window).ok_or(MemError::Access)?;
        if keys.slot_of(b.new_key) != Some(slot) || b.access & ACCESS_ZERO_BASED != 0 {
            return Err(MemError::Access);
        }
        let mut s = self.slots.write();
        // The window under the key its consumer last gave it (as rxe checks: a
        // consumer that did not undo the key of a failed bind is told so).
        let (type2, bound) = match s.get(slot) {
            Some(Some(MrEntry { key, pd, valid, mem: Backing::Window(w), .. })) if *key == b.window && *pd == by.pd => {
                (w.type2, *valid)
            }
            _ => return Err(MemError::Access),
        };
        if type2 && (bound || b.length == 0) {
            return Err(MemError::Access);
        }
        let region = if b.length == 0 {
            None
        } else {
            let i = keys.slot_of(b.region).ok_or(MemError::Access)?;
            let r = s.get(i).and_then(|c| c.as_ref()).ok_or(MemError::Access)?;
            let writes = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
            if r.key != b.region
                || !r.valid
                || r.pd != by.pd
                || matches!(r.mem, Backing::Pages(_) | Backing::Window(_))
                || r.access & ACCESS_MW_BIND == 0
                || (b.access & writes != 0 && r.access & ACCESS_LOCAL_WRITE == 0)
                || offset_in(r, b.addr, b.length).is_none()
            {
                return Err(MemError::Access);
            }
            Some(i)
        };
        Self::unbind(&mut s, keys, slot);
        if let Some(Some(r)) = region.and_then(|i| s.get_mut(i)) {
            r.windows += 1;
        }
        let e = s.get_mut(slot).and_then(|c| c.as_mut()).ok_or(MemError::Access)?;
        e.key = b.new_key;
        e.iova = b.addr;
        e.length = b.length;
        e.access = b.access;
        e.valid = region.is_some();
        e.mem = Backing::Window(Window { type2, region: b.region, qp: by.qp });
        Ok(())
    }

    /// Stages the page list a consumer mapped for the fast-registration MR whose
    /// key slot `key` names (at REG_MR post time); `EINVAL` if it is not one or the
    /// list does not fit.
    pub(crate) fn stage_pages(&self, keys: &IdTable, key: u32, pages: &[u64], page_size: u64, iova: u64, length: u64) -> Result {
        let slot = keys.slot_of(key).ok_or(EINVAL)?;
        let mut s = self.slots.write();
        let Some(Some(MrEntry { mem: Backing::Pages(p), .. })) = s.get_mut(slot) else { return Err(EINVAL) };
        let dst = p.staged.get_mut(..pages.len()).ok_or(EINVAL)?;
        dst.copy_from_slice(pages);
        p.staged_n = pages.len();
        p.staged_page_size = page_size;
        p.staged_iova = iova;
        p.staged_length = length;
        Ok(())
    }

    /// Executes a REG_MR of a QP in `pd`: the staged page list becomes the
    /// registration, under `new_key` (same slot) with `access`. Refused unless the
    /// MR is a fast-registration MR of `pd` that is not valid (verbs: invalidate
    /// before registering again).
    pub(crate) fn fast_register(&self, keys: &IdTable, new_key: u32, pd: PdId, access: u32) -> Result<(), MemError> {
        let slot = keys.slot_of(new_key).ok_or(MemError::Access)?;
        let mut s = self.slots.write();
        let e = s.get_mut(slot).and_then(|c| c.as_mut()).ok_or(MemError::Access)?;
        if e.valid || e.pd != pd {
            return Err(MemError::Access);
        }
        let Backing::Pages(p) = &mut e.mem else { return Err(MemError::Access) };
        let n = p.staged_n;
        let (dst, src) = (p.pages.get_mut(..n).ok_or(MemError::Access)?, p.staged.get(..n).ok_or(MemError::Access)?);
        dst.copy_from_slice(src);
        p.n = n;
        p.page_size = p.staged_page_size;
        e.iova = p.staged_iova;
        e.length = p.staged_length;
        e.key = new_key;
        e.access = access;
        e.valid = true;
        Ok(())
    }

    /// Invalidates `key` for `by` (LOCAL_INV, or SEND_WITH_INV from the peer,
    /// spec MR-9.2.3): a valid fast-registration MR of its PD, or a type 2 memory
    /// window it bound. Ordinary MRs and type 1 windows cannot be invalidated.
    pub(crate) fn invalidate(&self, keys: &IdTable, key: u32, by: Accessor) -> Result<(), MemError> {
        let slot = keys.slot_of(key).ok_or(MemError::Access)?;
        let mut s = self.slots.write();
        let e = s.get_mut(slot).and_then(|c| c.as_mut()).ok_or(MemError::Access)?;
        if e.key != key || !e.valid || e.pd != by.pd {
            return Err(MemError::Access);
        }
        match &e.mem {
            Backing::Pages(_) => {
                e.valid = false;
                Ok(())
            }
            Backing::Window(w) if w.type2 && w.qp == by.qp => {
                Self::unbind(&mut s, keys, slot);
                Ok(())
            }
            _ => Err(MemError::Access),
        }
    }

    /// Runs `f(memory, registration iova, offset)` on the memory of `key` at the
    /// offset of `va`, after the MR-9.2 checks for an access of `len` bytes by a QP
    /// in `pd`, and returns what `f` does (the copy's outcome). Accesses run in
    /// parallel with each other: `f` may only copy. A fault (memory not resident,
    /// spec MR-9.2.5) is noted in `fault` unless one is noted there already.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn access(
        &self,
        keys: &IdTable,
        key: u32,
        by: Accessor,
        va: u64,
        len: usize,
        need: Need,
        fault: &mut Option<FaultAt>,
        f: impl FnOnce(&Backing, u64, u64) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let s = self.slots.read();
        Self::checked(&s, keys, key, by, va, len, need, fault, f)
    }

    /// [`Self::access`] with the table held alone, so that `f` is atomic with
    /// respect to every other access of the device (read-modify-write atomics).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn access_alone(
        &self,
        keys: &IdTable,
        key: u32,
        by: Accessor,
        va: u64,
        len: usize,
        need: Need,
        fault: &mut Option<FaultAt>,
        f: impl FnOnce(&Backing, u64, u64) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let s = self.slots.write();
        Self::checked(&s, keys, key, by, va, len, need, fault, f)
    }

    /// Checks that `key` names a valid region of `pd` granting every right in
    /// `rights` and, if given, that `(va, len)` lies within it (spec MR-9.2; a
    /// FLUSH, MR-4.4.7, touches no byte itself).
    pub(crate) fn check_rights(&self, keys: &IdTable, key: u32, by: Accessor, range: Option<(u64, u64)>, rights: u32) -> Result<(), MemError> {
        let s = self.slots.read();
        Self::resolve(&s, keys, key, by, rights, false, range).map(|_| ())
    }

    /// Spec: MR-9.2 — [`Self::resolve`], then `f`; MR-9.2.5 — a fault is noted.
    #[allow(clippy::too_many_arguments)]
    fn checked(
        slots: &[Option<MrEntry>],
        keys: &IdTable,
        key: u32,
        by: Accessor,
        va: u64,
        len: usize,
        need: Need,
        fault: &mut Option<FaultAt>,
        f: impl FnOnce(&Backing, u64, u64) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let (r, off) = Self::resolve(slots, keys, key, by, need.right(), need.is_local(), Some((va, len as u64)))?;
        let res = f(&r.mem, r.iova, off);
        if let (Err(MemError::Fault), Backing::Odp(mem), None) = (res, &r.mem, &fault) {
            // The rest of a message usually follows: fault ahead within the region.
            let (len, write) = (len as u64, need.writes());
            let ahead = len.max(FAULT_AHEAD.min(r.length.saturating_sub(off)));
            // An Arc clone (no allocation): the packet path may do it.
            *fault = Some(FaultAt { mem: mem.clone(), offset: off, len, ahead, write });
        }
        res
    }

    /// The on-demand memory of the region `key` names for a local access by `by`
    /// (`ibv_advise_mr`), with the offset of `va`; `None` for another kind of
    /// region. `EINVAL` if the key fails the checks of a local access of `len`
    /// bytes, `EPERM` if `write` and the region may not be written.
    pub(crate) fn on_demand(&self, keys: &IdTable, key: u32, by: Accessor, va: u64, len: u64, write: bool) -> Result<Option<(Arc<OdpMem>, u64)>> {
        let s = self.slots.read();
        let (r, off) = Self::resolve(&s, keys, key, by, Need::LocalRead.right(), true, Some((va, len))).map_err(|_| EINVAL)?;
        // A prefetch for writing needs a region that may be written (EPERM, as rxe).
        if write && r.access & WRITABLE == 0 {
            return Err(EPERM);
        }
        Ok(match &r.mem {
            Backing::Odp(m) => Some((m.clone(), off)),
            _ => None,
        })
    }

    /// The region an access by `by` with `key` reaches, and the offset of `range`
    /// in it, after the checks (spec MR-9.2.1): a valid entry under exactly this
    /// key, of the QP's PD, granting `rights`, holding the range. A window (spec
    /// MR-9.2.4) is then checked as remote-only and, for type 2, as the binding
    /// QP's; the range is found in its region.
    #[allow(clippy::too_many_arguments)]
    fn resolve<'s>(
        slots: &'s [Option<MrEntry>],
        keys: &IdTable,
        key: u32,
        by: Accessor,
        rights: u32,
        local: bool,
        range: Option<(u64, u64)>,
    ) -> Result<(&'s MrEntry, u64), MemError> {
        let valid = |k: u32| {
            let e = keys.slot_of(k).and_then(|i| slots.get(i)).and_then(|c| c.as_ref())?;
            (e.key == k && e.valid).then_some(e)
        };
        let offset = |e: &MrEntry| match range {
            Some((va, len)) => offset_in(e, va, len).ok_or(MemError::Access),
            None => Ok(0),
        };
        let e = valid(key).ok_or(MemError::Access)?;
        if e.pd != by.pd || e.access & rights != rights {
            return Err(MemError::Access);
        }
        let off = offset(e)?;
        let Backing::Window(w) = &e.mem else { return Ok((e, off)) };
        if local || (w.type2 && w.qp != by.qp) {
            return Err(MemError::Access);
        }
        let r = valid(w.region).ok_or(MemError::Access)?;
        Ok((r, offset(r)?))
    }
}

#[kunit_tests(rdma_metaroce_mr)]
mod tests {
    use super::*;

    fn entry(iova: u64, length: u64) -> MrEntry {
        MrEntry { key: 0x100, pd: PdId(1), access: ACCESS_LOCAL_WRITE, iova, length, mem: Backing::None, valid: true, windows: 0 }
    }

    #[test]
    fn ranges_must_lie_inside_the_region() {
        let e = entry(0x1000, 0x100);
        assert_eq!(offset_in(&e, 0x1000, 0x100), Some(0));
        assert_eq!(offset_in(&e, 0x1010, 0x10), Some(0x10));
        assert_eq!(offset_in(&e, 0x1001, 0x100), None);
        assert_eq!(offset_in(&e, 0xfff, 1), None);
        assert_eq!(offset_in(&e, u64::MAX, 2), None);
    }

    #[test]
    fn access_checks_key_pd_rights_and_memory() -> Result {
        let keys = KBox::pin_init(IdTable::new(crate::ids::Layout::Key, 16, 1, 0x5a, 0x3c3c)?, GFP_KERNEL)?;
        let t = KBox::pin_init(MrTable::new(16)?, GFP_KERNEL)?;
        let key = keys.alloc()?;
        t.insert(&keys, MrEntry { key, ..entry(0x1000, 0x100) })?;
        let ok = |_: &Backing, _: u64, _: u64| Ok(());
        let qp = Accessor { pd: PdId(1), qp: QpId::new() };
        let other = Accessor { pd: PdId(2), ..qp };
        assert_eq!(t.access(&keys, key, qp, 0x1000, 8, Need::LocalRead, &mut None, ok), Ok(()));
        assert_eq!(t.access(&keys, key, qp, 0x1000, 8, Need::LocalWrite, &mut None, ok), Ok(()));
        assert_eq!(t.access(&keys, key, qp, 0x10f9, 8, Need::LocalRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, key, qp, 0x1000, 8, Need::LocalRead, &mut None, |_, _, _| Err(MemError::Access)), Err(MemError::Access));
        assert_eq!(t.access(&keys, key ^ 1, qp, 0x1000, 8, Need::LocalRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, key, other, 0x1000, 8, Need::LocalRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, key, qp, 0x1000, 8, Need::RemoteWrite, &mut None, ok), Err(MemError::Access));
        // Held alone (atomics): the same checks.
        assert_eq!(t.access_alone(&keys, key, qp, 0x1000, 8, Need::LocalWrite, &mut None, ok), Ok(()));
        assert_eq!(t.access_alone(&keys, key, qp, 0x10f9, 8, Need::LocalRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access_alone(&keys, key, other, 0x1000, 8, Need::LocalRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access_alone(&keys, key, qp, 0x1000, 8, Need::RemoteAtomic, &mut None, ok), Err(MemError::Access));
        assert!(t.remove(&keys, key ^ 1)?.is_none());
        assert!(t.remove(&keys, key)?.is_some());
        assert!(t.remove(&keys, key)?.is_none());
        Ok(())
    }

    /// A region of PD 1 at 0x1000..0x1100 that windows may be bound to, and a window
    /// of each type; returns (region key, type 1 key, type 2 key).
    fn windows_setup(keys: &IdTable, t: &MrTable) -> Result<(u32, u32, u32)> {
        let region = keys.alloc()?;
        let access = ACCESS_LOCAL_WRITE | ACCESS_MW_BIND;
        t.insert(keys, MrEntry { key: region, access, ..entry(0x1000, 0x100) })?;
        let (w1, w2) = (keys.alloc()?, keys.alloc()?);
        t.insert(keys, MrEntry { key: w1, ..Window::entry(PdId(1), false) })?;
        t.insert(keys, MrEntry { key: w2, ..Window::entry(PdId(1), true) })?;
        Ok((region, w1, w2))
    }

    fn bind(window: u32, new_key: u32, region: u32, addr: u64, length: u64, access: u32) -> Bind {
        Bind { window, new_key, region, addr, length, access }
    }

    #[test]
    fn windows_grant_their_own_range_and_rights_to_remote_accesses() -> Result {
        let keys = KBox::pin_init(IdTable::new(crate::ids::Layout::Key, 16, 1, 0x5a, 0x3c3c)?, GFP_KERNEL)?;
        let t = KBox::pin_init(MrTable::new(16)?, GFP_KERNEL)?;
        let (region, w1, w2) = windows_setup(&keys, &t)?;
        let (qp, peer) = (Accessor { pd: PdId(1), qp: QpId::new() }, Accessor { pd: PdId(1), qp: QpId::new() });
        let ok = |_: &Backing, _: u64, _: u64| Ok(());
        // Succeeds only if the copy is handed the region's memory at `want`
        // (its iova, the offset into it).
        let at = |want: (u64, u64)| move |_: &Backing, iova: u64, off: u64| if (iova, off) == want { Ok(()) } else { Err(MemError::Access) };
        // Type 1 under a new low byte, remote write over 0x1010..0x1030.
        let k1 = w1 ^ 0x01;
        assert_eq!(t.bind(&keys, &bind(w1, k1, region, 0x1010, 0x20, ACCESS_REMOTE_WRITE), qp), Ok(()));
        assert_eq!(t.access(&keys, k1, peer, 0x1018, 8, Need::RemoteWrite, &mut None, at((0x1000, 0x18))), Ok(()));
        // Not the old key, not beyond the window, not a right it lacks, never local.
        assert_eq!(t.access(&keys, w1, peer, 0x1018, 8, Need::RemoteWrite, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, k1, peer, 0x102c, 8, Need::RemoteWrite, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, k1, peer, 0x1018, 8, Need::RemoteRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, k1, peer, 0x1018, 8, Need::LocalWrite, &mut None, ok), Err(MemError::Access));
        // A region with a window bound cannot go; type 1 cannot be invalidated, a
        // zero-length bind unbinds it.
        assert_eq!(t.remove(&keys, region).err(), Some(EBUSY));
        assert_eq!(t.invalidate(&keys, k1, qp), Err(MemError::Access));
        let k1b = k1 ^ 0x02;
        assert_eq!(t.bind(&keys, &bind(k1, k1b, region, 0, 0, 0), qp), Ok(()));
        assert_eq!(t.access(&keys, k1b, peer, 0x1018, 8, Need::RemoteWrite, &mut None, ok), Err(MemError::Access));
        // Type 2: only through the QP that bound it, until invalidated.
        let k2 = w2 ^ 0x10;
        assert_eq!(t.bind(&keys, &bind(w2, k2, region, 0x1000, 0x100, ACCESS_REMOTE_READ), qp), Ok(()));
        assert_eq!(t.access(&keys, k2, qp, 0x10f8, 8, Need::RemoteRead, &mut None, ok), Ok(()));
        assert_eq!(t.access(&keys, k2, peer, 0x10f8, 8, Need::RemoteRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.check_rights(&keys, k2, qp, Some((0x1000, 0x100)), ACCESS_REMOTE_READ), Ok(()));
        // Bound already: no second bind; another QP cannot invalidate it.
        assert_eq!(t.bind(&keys, &bind(k2, k2 ^ 1, region, 0x1000, 8, ACCESS_REMOTE_READ), qp), Err(MemError::Access));
        assert_eq!(t.invalidate(&keys, k2, peer), Err(MemError::Access));
        assert_eq!(t.invalidate(&keys, k2, qp), Ok(()));
        assert_eq!(t.access(&keys, k2, qp, 0x10f8, 8, Need::RemoteRead, &mut None, ok), Err(MemError::Access));
        assert_eq!(t.invalidate(&keys, k2, qp), Err(MemError::Access));
        // Unbound everywhere: the region may go, and the windows with it.
        assert!(t.remove_window(&keys, w1).is_some());
        assert!(t.remove_window(&keys, region).is_none());
        assert!(t.remove(&keys, region)?.is_some());
        Ok(())
    }

    #[test]
    fn binds_follow_the_verbs_rules() -> Result {
        let keys = KBox::pin_init(IdTable::new(crate::ids::Layout::Key, 16, 1, 0x5a, 0x3c3c)?, GFP_KERNEL)?;
        let t = KBox::pin_init(MrTable::new(16)?, GFP_KERNEL)?;
        let (region, w1, w2) = windows_setup(&keys, &t)?;
        let qp = Accessor { pd: PdId(1), qp: QpId::new() };
        let rw = ACCESS_REMOTE_WRITE;
        let refused = [
            // Another PD's QP; a stale window key; a new key in another slot; a
            // zero-based window.
            (bind(w1, w1 ^ 1, region, 0x1000, 8, rw), Accessor { pd: PdId(2), ..qp }),
            (bind(w1 ^ 7, w1 ^ 1, region, 0x1000, 8, rw), qp),
            (bind(w1, w1 ^ 0x100, region, 0x1000, 8, rw), qp),
            (bind(w1, w1 ^ 1, region, 0x1000, 8, rw | ACCESS_ZERO_BASED), qp),
            // Beyond the region; not a region's key; a type 2 of zero bytes.
            (bind(w1, w1 ^ 1, region, 0x10f9, 8, rw), qp),
            (bind(w1, w1 ^ 1, w2, 0x1000, 8, rw), qp),
            (bind(w2, w2 ^ 1, region, 0x1000, 0, rw), qp),
        ];
        for (b, by) in refused {
            assert_eq!(t.bind(&keys, &b, by), Err(MemError::Access));
        }
        // A region without MW_BIND, or without local write for a writable window.
        let plain = keys.alloc()?;
        t.insert(&keys, MrEntry { key: plain, ..entry(0x1000, 0x100) })?;
        assert_eq!(t.bind(&keys, &bind(w1, w1 ^ 1, plain, 0x1000, 8, rw), qp), Err(MemError::Access));
        let readonly = keys.alloc()?;
        let e = MrEntry { key: readonly, access: ACCESS_MW_BIND, ..entry(0x1000, 0x100) };
        t.insert(&keys, e)?;
        assert_eq!(t.bind(&keys, &bind(w1, w1 ^ 1, readonly, 0x1000, 8, rw), qp), Err(MemError::Access));
        assert_eq!(t.bind(&keys, &bind(w1, w1 ^ 1, readonly, 0x1000, 8, ACCESS_REMOTE_READ), qp), Ok(()));
        // Rebinding a type 1 window moves it: the first region is free to go.
        assert_eq!(t.bind(&keys, &bind(w1 ^ 1, w1 ^ 2, region, 0x1000, 8, rw), qp), Ok(()));
        assert!(t.remove(&keys, readonly)?.is_some());
        assert_eq!(t.remove(&keys, region).err(), Some(EBUSY));
        Ok(())
    }
}
