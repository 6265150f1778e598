// SPDX-License-Identifier: GPL-2.0

//! A reader-writer spinlock that no softirq can interrupt on its holder's CPU
//! ([`RwLockBh`]): any number of readers hold it together, a writer alone.
//!
//! It is for data that the packet path only reads and that changes rarely, such
//! as the memory-region table: every received payload is copied while the table
//! is read-held (so deregistration, which write-locks it, cannot unpin pages under
//! a copy), and with an exclusive lock the copies of all QPs of a device would run
//! one at a time. Bottom halves are handled as for [`super::SpinLockBh`]: disabled
//! when taken from task context with them enabled, left alone in softirq, in a
//! BH-disabled section and with interrupts off. The kernel's queued rwlock lets a
//! reader in softirq pass a waiting writer, so a softirq reader never waits for a
//! writer that waits for a reader it interrupted.
//!
//! The kernel crate has no reader-writer spinlock, so it is built here on
//! `helpers.c`.

use super::raw;
use core::cell::UnsafeCell;
use core::marker::PhantomPinned;
use core::ops::{Deref, DerefMut};
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::LockClassKey;
use kernel::types::Opaque;

/// A reader-writer spinlock over a `T` (see the module doc).
///
/// # Invariants
///
/// `lock` is initialised (by [`RwLockBh::new`]); `data` is only read while `lock`
/// is held for reading or writing, and only written while it is held for writing.
#[pin_data]
pub(crate) struct RwLockBh<T> {
    #[pin]
    lock: Opaque<bindings::rwlock_t>,
    /// The kernel's lock is conservatively treated as address-sensitive.
    #[pin]
    _pin: PhantomPinned,
    data: UnsafeCell<T>,
}

// SAFETY: The lock may move to another thread with its data if the data may.
unsafe impl<T: Send> Send for RwLockBh<T> {}

// SAFETY: Shared references reach several threads only while read-held (hence
// `T: Sync`); a writer gets `&mut T` alone (hence `T: Send`).
unsafe impl<T: Send + Sync> Sync for RwLockBh<T> {}

/// A [`RwLockBh`] initialiser with a static lock class.
macro_rules! new_rwlock_bh {
    ($inner:expr, $name:literal) => {
        $crate::ffi::RwLockBh::new($inner, kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_rwlock_bh;

impl<T> RwLockBh<T> {
    /// A lock over `data`, of lock class `key`, named `name` for lockdep.
    pub(crate) fn new(data: T, name: &'static CStr, key: Pin<&'static LockClassKey>) -> impl PinInit<Self> {
        pin_init!(Self {
            data: UnsafeCell::new(data),
            _pin: PhantomPinned,
            // SAFETY: `slot` is valid for the call; `name` and `key` are static.
            lock <- Opaque::ffi_init(|slot: *mut bindings::rwlock_t| unsafe {
                raw::mrc_rwlock_init(slot.cast(), name.as_char_ptr().cast(), key.as_ptr().cast())
            }),
        })
    }

    /// Holds the lock for reading (shared with other readers) until the guard drops.
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        // SAFETY: The lock is initialised (type invariant).
        let bh = unsafe { raw::mrc_read_lock_nosoftirq(self.lock.get().cast()) };
        ReadGuard { lock: self, bh }
    }

    /// Holds the lock for writing (alone) until the guard drops.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        // SAFETY: The lock is initialised (type invariant).
        let bh = unsafe { raw::mrc_write_lock_nosoftirq(self.lock.get().cast()) };
        WriteGuard { lock: self, bh }
    }
}

/// Shared access to the data of a read-held [`RwLockBh`].
///
/// # Invariants
///
/// The lock is held for reading, taken with bottom halves disabled iff `bh`.
pub(crate) struct ReadGuard<'a, T> {
    lock: &'a RwLockBh<T>,
    bh: bool,
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: Read-held (type invariant): no writer exists while the guard does.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: Held for reading, taken as `bh` says (type invariant).
        unsafe { raw::mrc_read_unlock_nosoftirq(self.lock.lock.get().cast(), self.bh) };
    }
}

/// Exclusive access to the data of a write-held [`RwLockBh`].
///
/// # Invariants
///
/// The lock is held for writing, taken with bottom halves disabled iff `bh`.
pub(crate) struct WriteGuard<'a, T> {
    lock: &'a RwLockBh<T>,
    bh: bool,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: Write-held (type invariant): nobody else reads or writes.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: Write-held (type invariant), and `&mut self` makes this the only
        // reference through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: Held for writing, taken as `bh` says (type invariant).
        unsafe { raw::mrc_write_unlock_nosoftirq(self.lock.lock.get().cast(), self.bh) };
    }
}
