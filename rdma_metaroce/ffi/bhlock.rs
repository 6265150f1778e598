// SPDX-License-Identifier: GPL-2.0

//! A spinlock that no softirq can interrupt on its holder's CPU
//! ([`SpinLockBh`]).
//!
//! Kernel consumers post work requests and poll completion queues from softirq (a
//! CQ polled with `IB_POLL_SOFTIRQ` runs its completion handlers there, and they
//! post again), while the QP's work takes the same locks in task context. With a
//! plain spinlock the softirq could interrupt the work on the same CPU and spin
//! forever on the lock the work holds. This lock disables bottom halves when taken
//! from task context with them enabled, and is taken plainly where that is already
//! excluded or not allowed: in softirq, in a BH-disabled section, and with
//! interrupts off (ib_mad posts with interrupts disabled, and `local_bh_enable`
//! is illegal there). Lockdep then sees one consistent usage.
//!
//! The kernel crate offers only the plain and IRQ-disabling spinlocks, so the
//! backend is built here on `helpers.c`.

use super::raw;
use kernel::bindings;
use kernel::sync::lock::{Backend, Lock};

/// A spinlock that excludes softirqs on the holder's CPU (see the module doc).
pub(crate) type SpinLockBh<T> = Lock<T, SpinLockBhBackend>;

/// A [`SpinLockBh`] initialiser with a static lock class, as
/// `kernel::new_spinlock!` makes for a [`kernel::sync::SpinLock`].
macro_rules! new_spinlock_bh {
    ($inner:expr, $name:literal) => {
        $crate::ffi::SpinLockBh::new($inner, kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_spinlock_bh;

/// The backend of [`SpinLockBh`].
pub(crate) struct SpinLockBhBackend;

// SAFETY: The kernel's `spinlock_t` ensures mutual exclusion; `lock`/`try_lock`
// record in the guard state whether they disabled bottom halves, and `unlock`
// releases the same way. `relock` keeps the default (calls `lock` again and
// stores its new state).
unsafe impl Backend for SpinLockBhBackend {
    type State = bindings::spinlock_t;
    /// Whether taking the lock disabled bottom halves.
    type GuardState = bool;

    unsafe fn init(ptr: *mut Self::State, name: *const kernel::ffi::c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: Per the trait contract `ptr` is valid for writes and `name`/`key`
        // live forever.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: Per the trait contract `ptr` is an initialised spinlock.
        unsafe { raw::mrc_spin_lock_nosoftirq(ptr.cast()) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        let mut bh = false;
        // SAFETY: As in `lock`; `bh` is a valid out pointer.
        let got = unsafe { raw::mrc_spin_trylock_nosoftirq(ptr.cast(), &mut bh) };
        got.then_some(bh)
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: Per the trait contract the caller holds the lock, taken by `lock`
        // or `try_lock`, which returned `guard_state`.
        unsafe { raw::mrc_spin_unlock_nosoftirq(ptr.cast(), *guard_state) }
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: Per the trait contract `ptr` is an initialised spinlock.
        unsafe { bindings::spin_assert_is_held(ptr) }
    }
}
