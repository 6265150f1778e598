// SPDX-License-Identifier: GPL-2.0

//! On-demand-paging memory ([`OdpMem`]): a user registration whose pages are not
//! pinned (`IB_ACCESS_ON_DEMAND`, spec MR-9.2.5).
//!
//! ib_core's `ib_umem_odp` watches the range with an mmu interval notifier and
//! records which pages the process has. The packet path cannot use that record
//! directly (ib_core rewrites it while faulting, under a mutex the packet path may
//! not take), so this type keeps a page table of its own, behind a lock the packet
//! path may take:
//!
//! * a copy holds the table read-locked while it copies, and a page absent from it
//!   (or read-only, for a write) makes the access a [`MemError::Fault`];
//! * [`OdpMem::fault_in`] (process context: the QP's fault work, `ibv_advise_mr`)
//!   has ib_core bring the pages in and, still holding ib_core's `umem_mutex`,
//!   enters them in the table;
//! * an invalidation (the process unmaps, swaps, migrates a page, or exits) clears
//!   the pages from the table under its write lock, holding `umem_mutex`, before
//!   ib_core lets the pages go. So no page leaves while a copy uses it, and no copy
//!   starts on a page that is leaving.
//!
//! Lock order: `umem_mutex`, then the table (the packet path takes only the table,
//! nested inside the MR table's lock).

use super::raw;
use super::{new_rwlock_bh, RwLockBh};
use crate::proto::MemError;
use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use kernel::page::{PAGE_SHIFT, PAGE_SIZE};
use kernel::prelude::*;
use kernel::sync::Arc;

/// Page table entry: no page.
const ABSENT: usize = 0;
/// Page table entry bit: the page may be written (a `struct page` address is at
/// least 8-aligned, so its low bits are free).
const WRITABLE: usize = 1;
/// Page table entry: the page could not be brought in (the owner no longer maps
/// it); accesses are errors until an invalidation of the range clears it.
const FAILED: usize = 2;
/// Pages entered in the table per hold of its lock while faulting in a large range
/// (bounds how long bottom halves stay off).
const FILL_BATCH: usize = 512;

/// An on-demand-paging registration (see the module doc).
///
/// # Invariants
///
/// `odp` came from `mrc_odp_get` and is released exactly once, on drop. Its owner
/// (`private`) is this object from `new` on; every non-[`ABSENT`]/[`FAILED`] entry
/// of `pages` is a page ib_core's record holds, entered with `umem_mutex` held, and
/// is cleared (under `pages`' write lock) before ib_core releases it.
#[pin_data(PinnedDrop)]
pub(crate) struct OdpMem {
    odp: NonNull<raw::ib_umem_odp>,
    /// Offset of the registration's first byte into its first page.
    first_offset: u64,
    /// The registration may be written (`IB_ACCESS_LOCAL_WRITE` or a remote write
    /// right).
    writable: bool,
    /// One entry per page of the range: [`ABSENT`], [`FAILED`], or the address of
    /// the `struct page` with [`WRITABLE`] if it may be written.
    #[pin]
    pages: RwLockBh<KVVec<usize>>,
}

// SAFETY: The object is plain data plus an `ib_umem_odp` that any thread may
// fault, copy through and release (ib_core serialises with `umem_mutex`).
unsafe impl Send for OdpMem {}
// SAFETY: Shared use goes through the table's lock or ib_core's `umem_mutex`.
unsafe impl Sync for OdpMem {}

impl OdpMem {
    /// Registers `len` bytes at `addr` of the calling process without pinning them
    /// and enters the pages it already has. Process context of that process.
    ///
    /// # Safety
    ///
    /// `ib` is a live device of this driver.
    pub(super) unsafe fn new(ib: *mut raw::ib_device, addr: u64, len: usize, access: c_int) -> Result<Arc<Self>> {
        let mut err: c_int = 0;
        // SAFETY: Per the contract `ib` is live; the call sleeps (process context).
        let odp = NonNull::new(unsafe { raw::mrc_odp_get(ib, addr, len, access, &mut err) })
            .ok_or_else(|| Error::from_errno(err))?;
        // SAFETY: `odp` is live (just made, not yet shared).
        let (n, first_offset, writable) = unsafe {
            (raw::mrc_odp_npages(odp.as_ptr()), raw::mrc_odp_first_offset(odp.as_ptr()), raw::mrc_odp_writable(odp.as_ptr()))
        };
        let made = KVVec::from_elem(ABSENT, n, GFP_KERNEL).map_err(Error::from).and_then(|table| {
            Arc::pin_init(
                try_pin_init!(OdpMem {
                    odp,
                    first_offset: first_offset as u64,
                    writable,
                    pages <- new_rwlock_bh!(table, "metaroce_odp_pages"),
                }? Error),
                GFP_KERNEL,
            )
        });
        let mem = match made {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: Not owned by anything yet; released once.
                unsafe { raw::mrc_odp_release(odp.as_ptr()) };
                return Err(e);
            }
        };
        // SAFETY: The object is pinned in the Arc and releases `odp` (which waits
        // for invalidations in progress) before it goes: it outlives every call of
        // `invalidate_cb` with it.
        unsafe { raw::mrc_odp_set_owner(odp.as_ptr(), Arc::as_ptr(&mem).cast_mut().cast(), Some(invalidate_cb)) };
        // What is present already (as rxe does): no fault, best effort.
        if n > 0 {
            let _ = mem.enter(0, n, false, false, false);
        }
        Ok(mem)
    }

    /// The pages `[first, first + n)` that `len` bytes (at least one) at `offset`
    /// into the registration touch, if they lie within it.
    fn span(&self, offset: u64, len: u64) -> Option<(usize, usize)> {
        let start = self.first_offset.checked_add(offset)?;
        let end = start.checked_add(len.max(1))?;
        let first = (start >> PAGE_SHIFT) as usize;
        let last = ((end - 1) >> PAGE_SHIFT) as usize;
        Some((first, last - first + 1))
    }

    /// Brings the pages behind `len` bytes at `offset` in (writable if `write`) and
    /// enters them in the table; with `fault` false, only enters those the process
    /// has now (`IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`). A range the process no
    /// longer maps is marked failed: accesses to it are then errors. Sleeps.
    pub(crate) fn fault_in(&self, offset: u64, len: u64, write: bool, fault: bool) -> Result {
        if write && !self.writable {
            return Err(EPERM);
        }
        let (first, n) = self.span(offset, len).ok_or(EINVAL)?;
        self.enter(first, n, write, fault, true)
    }

    /// [`Self::fault_in`] of a range wider than an access needs (fault-ahead): a
    /// failure marks nothing, since the access's own range may well be fine.
    pub(crate) fn fault_ahead(&self, offset: u64, len: u64, write: bool) -> Result {
        let (first, n) = self.span(offset, len).ok_or(EINVAL)?;
        self.enter(first, n, write, true, false)
    }

    /// A failure of [`Self::fault_in`] that trying again cannot mend: the range is
    /// not mapped (or not writably), or its process is gone.
    pub(crate) fn lasting(e: Error) -> bool {
        e == EFAULT || e == EPERM || e == EINVAL
    }

    /// See [`Self::fault_in`]; pages `[first, first + n)`, marked failed on a
    /// lasting failure if `mark`.
    fn enter(&self, first: usize, n: usize, write: bool, fault: bool, mark: bool) -> Result {
        // SAFETY: `odp` is live (type invariant); sleeps (the callers' contexts may).
        let r = unsafe { raw::mrc_odp_map_lock(self.odp.as_ptr(), first, n, write, fault) };
        if r < 0 {
            let e = Error::from_errno(r);
            // A range the process does not map (or not so that it may be
            // written), or a process that is gone, fails for good: every page of
            // the span (a read-only one that a write wanted too) until an
            // invalidation clears them. Anything else (out of memory, a busy
            // range) is tried again.
            if fault && mark && Self::lasting(e) {
                let mut t = self.pages.write();
                for entry in t.iter_mut().skip(first).take(n) {
                    *entry = FAILED;
                }
            }
            return Err(e);
        }
        // `umem_mutex` is held from here to the unlock: no invalidation runs, so
        // what ib_core's record says is what the process has.
        let mut at = first;
        while at < first + n {
            let batch = (first + n - at).min(FILL_BATCH);
            let mut t = self.pages.write();
            for i in at..at + batch {
                let mut writable = false;
                // SAFETY: `umem_mutex` is held (taken above); the helper checks `i`.
                let page = unsafe { raw::mrc_odp_page(self.odp.as_ptr(), i, &mut writable) };
                if let (Some(e), false) = (t.get_mut(i), page.is_null()) {
                    *e = page as usize | if writable { WRITABLE } else { 0 };
                }
            }
            drop(t);
            at += batch;
        }
        // SAFETY: Held since `mrc_odp_map_lock` succeeded.
        unsafe { raw::mrc_odp_unlock(self.odp.as_ptr()) };
        Ok(())
    }

    /// Copies `out.len()` bytes at `offset` into the registration out. Never sleeps.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.copy(offset, out.len(), false, |page, at, r| {
            let buf = &mut out[r];
            // SAFETY: `page` is a present page of the table, which is read-held for
            // the call (it cannot leave); `at + buf.len()` stays within it.
            unsafe { raw::mrc_page_copy(page, at, buf.as_mut_ptr().cast(), buf.len(), false) };
        })
    }

    /// Copies `data` to `offset` bytes into the registration. Never sleeps.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> Result<(), MemError> {
        self.copy(offset, data.len(), true, |page, at, r| {
            let buf = &data[r];
            // SAFETY: As in `read`, and the page is writable (checked); the helper
            // only reads `buf`.
            unsafe { raw::mrc_page_copy(page, at, buf.as_ptr().cast_mut().cast(), buf.len(), true) };
        })
    }

    /// Runs `f(page, offset in page, range of the buffer)` over the pages behind
    /// `len` bytes at `offset`, with the table read-held throughout, once every one
    /// of them is present (and writable, for a write): otherwise
    /// [`MemError::Fault`] (or [`MemError::Access`] for a failed page or a range
    /// outside the registration), having copied nothing.
    fn copy(
        &self,
        offset: u64,
        len: usize,
        write: bool,
        mut f: impl FnMut(*mut raw::page, usize, core::ops::Range<usize>),
    ) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        let (first, n) = self.span(offset, len as u64).ok_or(MemError::Access)?;
        let t = self.pages.read();
        let entries = t.get(first..first + n).ok_or(MemError::Access)?;
        for &e in entries {
            match e {
                FAILED => return Err(MemError::Access),
                ABSENT => return Err(MemError::Fault),
                e if write && e & WRITABLE == 0 => return Err(MemError::Fault),
                _ => {}
            }
        }
        let mut at = ((self.first_offset + offset) as usize) & (PAGE_SIZE - 1);
        let mut done = 0usize;
        for &e in entries {
            let chunk = (PAGE_SIZE - at).min(len - done);
            f((e & !WRITABLE) as *mut raw::page, at, done..done + chunk);
            done += chunk;
            at = 0;
        }
        Ok(())
    }
}

#[pinned_drop]
impl PinnedDrop for OdpMem {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Owned (type invariant), released once; waits for invalidations in
        // progress, after which none calls back. Sleeps: every owner drops the last
        // reference in process context.
        unsafe { raw::mrc_odp_release(self.odp.as_ptr()) };
    }
}

/// An invalidation of pages `[first, end)` of the registration `owner`: they leave
/// the table before ib_core releases them (called with `umem_mutex` held).
unsafe extern "C" fn invalidate_cb(owner: *mut c_void, first: usize, end: usize) {
    // SAFETY: `owner` is the `OdpMem` that named itself owner; it releases its
    // `ib_umem_odp` before it goes, which waits for this call (type invariant).
    let mem = unsafe { &*owner.cast::<OdpMem>() };
    let mut t = mem.pages.write();
    for e in t.iter_mut().take(end).skip(first) {
        *e = ABSENT;
    }
}
