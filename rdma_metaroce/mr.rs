// SPDX-License-Identifier: GPL-2.0

//! Memory regions as the data path sees them: the per-device table from memory key
//! to registration (protection domain, access rights, address range, pinned pages),
//! and the checks every access passes before a byte moves (spec MR-9.2: key, PD,
//! permission, bounds; any failure is an access error the core turns into a NAK or
//! a local protection error).
//!
//! The table's lock is held while bytes are copied, so deregistration (which takes
//! the entry out under the same lock before unpinning the pages) can never free
//! memory that a copy is using. Copies hold it for reading, so the QPs of a device
//! copy into and out of their regions in parallel; changes to the table (and
//! atomics, which must not interleave with each other) hold it alone.

use crate::ffi::{KernelVa, Umem};
use crate::ids::IdTable;
use crate::proto::MemError;
use kernel::prelude::*;

/// `IB_ACCESS_LOCAL_WRITE`.
pub(crate) const ACCESS_LOCAL_WRITE: u32 = 1;
/// `IB_ACCESS_REMOTE_WRITE`.
pub(crate) const ACCESS_REMOTE_WRITE: u32 = 2;
/// `IB_ACCESS_REMOTE_READ`.
pub(crate) const ACCESS_REMOTE_READ: u32 = 4;
/// `IB_ACCESS_REMOTE_ATOMIC`.
pub(crate) const ACCESS_REMOTE_ATOMIC: u32 = 8;
/// `IB_ACCESS_FLUSH_GLOBAL`.
pub(crate) const ACCESS_FLUSH_GLOBAL: u32 = 256;
/// `IB_ACCESS_FLUSH_PERSISTENT`.
pub(crate) const ACCESS_FLUSH_PERSISTENT: u32 = 512;

/// Identity of a protection domain (the address of its `ib_pd`; compared, never
/// dereferenced).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct PdId(pub(crate) usize);

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
    /// valid between a REG_MR and the next (local or remote) invalidation.
    pub(crate) valid: bool,
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

/// The memory behind a registration.
pub(crate) enum Backing {
    /// Pinned user pages, addressed by offset into the registration.
    User(Umem),
    /// Kernel virtual memory (the DMA MR of kernel consumers; `iova` 0, so the
    /// offset is the kernel address).
    Kernel(KernelVa),
    /// Kernel pages of a fast-registration MR (`iova` is the registration's).
    Pages(PageList),
    /// Nothing reachable (tests).
    #[allow(dead_code)]
    None,
}

impl Backing {
    /// Copies out of the registration at `offset`; false if not all bytes exist.
    pub(crate) fn read(&self, iova: u64, offset: u64, out: &mut [u8]) -> bool {
        match self {
            Backing::User(u) => u.read(offset, out),
            Backing::Kernel(k) => k.read(offset, out),
            Backing::Pages(p) => p.walk(iova, offset, out.len(), |va, r| p.va.read(va, &mut out[r])),
            Backing::None => false,
        }
    }

    /// Takes references to the pages behind `len` bytes at `offset` into `frags`
    /// (zero-copy transmit); false, taking nothing, where pages are not to be sent
    /// by reference (kernel memory is copied) or do not fit `frags`.
    pub(crate) fn take_pages(&self, _iova: u64, offset: u64, len: usize, frags: &mut crate::ffi::TxFrags) -> bool {
        match self {
            Backing::User(u) => u.take_pages(offset, len, frags),
            Backing::Kernel(_) | Backing::Pages(_) | Backing::None => false,
        }
    }

    /// Copies into the registration at `offset`; false if not all bytes fit.
    pub(crate) fn write(&self, iova: u64, offset: u64, data: &[u8]) -> bool {
        match self {
            Backing::User(u) => u.write(offset, data),
            Backing::Kernel(k) => k.write(offset, data),
            Backing::Pages(p) => p.walk(iova, offset, data.len(), |va, r| p.va.write(va, &data[r])),
            Backing::None => false,
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
    /// caller drops it (unpinning the pages) outside the lock.
    pub(crate) fn remove(&self, keys: &IdTable, key: u32) -> Option<MrEntry> {
        let slot = keys.slot_of(key)?;
        let mut s = self.slots.write();
        let cell = s.get_mut(slot)?;
        if cell.as_ref().is_some_and(|e| e.key == key) {
            cell.take()
        } else {
            None
        }
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

    /// Invalidates the fast-registration MR `key` of `pd` (LOCAL_INV, or
    /// SEND_WITH_INV from the peer). Ordinary MRs cannot be invalidated.
    pub(crate) fn invalidate(&self, keys: &IdTable, key: u32, pd: PdId) -> Result<(), MemError> {
        let slot = keys.slot_of(key).ok_or(MemError::Access)?;
        let mut s = self.slots.write();
        let e = s.get_mut(slot).and_then(|c| c.as_mut()).ok_or(MemError::Access)?;
        if e.key != key || !e.valid || e.pd != pd || !matches!(e.mem, Backing::Pages(_)) {
            return Err(MemError::Access);
        }
        e.valid = false;
        Ok(())
    }

    /// Runs `f(memory, registration iova, offset)` on the memory of `key` at the
    /// offset of `va`, after the MR-9.2 checks for an access of `len` bytes by a QP
    /// in `pd`. `f` returns whether the copy moved every byte. Accesses run in
    /// parallel with each other: `f` may only copy.
    pub(crate) fn access(
        &self,
        keys: &IdTable,
        key: u32,
        pd: PdId,
        va: u64,
        len: usize,
        need: Need,
        f: impl FnOnce(&Backing, u64, u64) -> bool,
    ) -> Result<(), MemError> {
        let slot = keys.slot_of(key).ok_or(MemError::Access)?;
        let s = self.slots.read();
        Self::checked(&s, slot, key, pd, va, len, need, f)
    }

    /// [`Self::access`] with the table held alone, so that `f` is atomic with
    /// respect to every other access of the device (read-modify-write atomics).
    pub(crate) fn access_alone(
        &self,
        keys: &IdTable,
        key: u32,
        pd: PdId,
        va: u64,
        len: usize,
        need: Need,
        f: impl FnOnce(&Backing, u64, u64) -> bool,
    ) -> Result<(), MemError> {
        let slot = keys.slot_of(key).ok_or(MemError::Access)?;
        let s = self.slots.write();
        Self::checked(&s, slot, key, pd, va, len, need, f)
    }

    /// Checks that `key` names a valid region of `pd` granting every right in
    /// `rights` and, if given, that `(va, len)` lies within it (spec MR-9.2; a
    /// FLUSH, MR-4.4.7, touches no byte itself).
    pub(crate) fn check_rights(&self, keys: &IdTable, key: u32, pd: PdId, range: Option<(u64, u64)>, rights: u32) -> Result<(), MemError> {
        let slot = keys.slot_of(key).ok_or(MemError::Access)?;
        let s = self.slots.read();
        let e = s.get(slot).and_then(|c| c.as_ref()).ok_or(MemError::Access)?;
        if e.key != key || !e.valid || e.pd != pd || e.access & rights != rights {
            return Err(MemError::Access);
        }
        match range {
            Some((va, len)) if offset_in(e, va, len).is_none() => Err(MemError::Access),
            _ => Ok(()),
        }
    }

    /// Spec: MR-9.2 — key, PD, right and bounds, then `f`.
    #[allow(clippy::too_many_arguments)]
    fn checked(
        slots: &[Option<MrEntry>],
        slot: usize,
        key: u32,
        pd: PdId,
        va: u64,
        len: usize,
        need: Need,
        f: impl FnOnce(&Backing, u64, u64) -> bool,
    ) -> Result<(), MemError> {
        let e = slots.get(slot).and_then(|c| c.as_ref()).ok_or(MemError::Access)?;
        if e.key != key || !e.valid || e.pd != pd || e.access & need.right() != need.right() {
            return Err(MemError::Access);
        }
        let off = offset_in(e, va, len as u64).ok_or(MemError::Access)?;
        if f(&e.mem, e.iova, off) {
            Ok(())
        } else {
            Err(MemError::Access)
        }
    }
}

#[kunit_tests(rdma_metaroce_mr)]
mod tests {
    use super::*;

    fn entry(iova: u64, length: u64) -> MrEntry {
        MrEntry { key: 0x100, pd: PdId(1), access: ACCESS_LOCAL_WRITE, iova, length, mem: Backing::None, valid: true }
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
        let keys = KBox::pin_init(IdTable::new(crate::ids::Layout::Key, 16, 1, 0x5a)?, GFP_KERNEL)?;
        let t = KBox::pin_init(MrTable::new(16)?, GFP_KERNEL)?;
        let key = keys.alloc()?;
        t.insert(&keys, MrEntry { key, ..entry(0x1000, 0x100) })?;
        let ok = |_: &Backing, _: u64, _: u64| true;
        assert_eq!(t.access(&keys, key, PdId(1), 0x1000, 8, Need::LocalRead, ok), Ok(()));
        assert_eq!(t.access(&keys, key, PdId(1), 0x1000, 8, Need::LocalWrite, ok), Ok(()));
        assert_eq!(t.access(&keys, key, PdId(1), 0x10f9, 8, Need::LocalRead, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, key, PdId(1), 0x1000, 8, Need::LocalRead, |_, _, _| false), Err(MemError::Access));
        assert_eq!(t.access(&keys, key ^ 1, PdId(1), 0x1000, 8, Need::LocalRead, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, key, PdId(2), 0x1000, 8, Need::LocalRead, ok), Err(MemError::Access));
        assert_eq!(t.access(&keys, key, PdId(1), 0x1000, 8, Need::RemoteWrite, ok), Err(MemError::Access));
        // Held alone (atomics): the same checks.
        assert_eq!(t.access_alone(&keys, key, PdId(1), 0x1000, 8, Need::LocalWrite, ok), Ok(()));
        assert_eq!(t.access_alone(&keys, key, PdId(1), 0x10f9, 8, Need::LocalRead, ok), Err(MemError::Access));
        assert_eq!(t.access_alone(&keys, key, PdId(2), 0x1000, 8, Need::LocalRead, ok), Err(MemError::Access));
        assert_eq!(t.access_alone(&keys, key, PdId(1), 0x1000, 8, Need::RemoteAtomic, ok), Err(MemError::Access));
        assert!(t.remove(&keys, key ^ 1).is_none());
        assert!(t.remove(&keys, key).is_some());
        assert!(t.remove(&keys, key).is_none());
        Ok(())
    }
}
