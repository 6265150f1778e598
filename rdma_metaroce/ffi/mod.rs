// SPDX-License-Identifier: GPL-2.0

//! The FFI layer: the only place in rdma_metaroce that contains `unsafe`.
//!
//! It owns the raw bindings to ib_core, the netdev layer and the UDP tunnel API
//! (generated at build time by `gen-bindings.sh` from the kernel the module is built
//! for, plus the forwarders in `helpers.c` for macros and static inlines), and wraps
//! them in safe types:
//!
//! * [`NetDev`]: a borrowed `struct net_device`.
//! * [`IbDev`]: a borrowed `struct ib_device` allocated by this driver, with access to
//!   the driver's per-device data.
//! * the registry of this driver's live devices ([`unregister_on_netdev`],
//!   [`unregister_all`]), which ties each device's lifetime to ib_core's callbacks.
//! * [`LinkOps`] / [`NetdevNotifier`]: the `rdma link` type and the netdev event
//!   subscription, unregistered on drop.
//!
//! The callbacks ib_core and the netdev layer invoke are trampolines here that turn raw
//! pointers into these types and call the safe driver logic in [`crate::device`].

use kernel::alloc::flags::__GFP_ZERO;
use kernel::prelude::*;

pub(crate) mod raw;

mod bhlock;
mod rwlock;

mod datapath;
mod ibdev;
mod link;
mod net;
mod netdev;
mod odp;
mod uring;
mod verbs;

pub(crate) use ibdev::{
    registry_init, unregister_all, unregister_on_netdev, DeviceCaps, IbDev, IbMtu, ParentDevice,
    PortInfo, PortState,
};
pub(crate) use datapath::{KernelVa, LaterCopies, QpTable, TxFrags, Umem};
pub(crate) use odp::OdpMem;
pub(crate) use uring::{UserCq, UserQueues};
pub(crate) use bhlock::{new_spinlock_bh, SpinLockBh};
pub(crate) use rwlock::{new_rwlock_bh, RwLockBh};
pub(crate) use link::LinkOps;

/// `EOPNOTSUPP` ("operation not supported"), the errno rdma-core expects for verbs a
/// device does not offer; the kernel crate names only `ENOTSUPP`.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(raw::EOPNOTSUPP as i32))
}

/// Types whose all-zero bit pattern is a valid value, so they can be allocated
/// zero-filled on the heap without ever being built on the (small) kernel stack.
///
/// # Safety
///
/// Implementors guarantee that all-zero bytes form a valid, safe-to-use value.
pub(crate) unsafe trait ZeroValid {}

// SAFETY: The protocol core specifies that a zero-filled `Connection` is valid (spec
// MR-10.2.2: every field is an integer, array or zero-valid option), and
// proto/tests/zeroed.rs asserts it on the host.
unsafe impl ZeroValid for crate::proto::Connection {}

/// A heap value of `T`, zero-filled (then typically `reset` in place by the caller).
pub(crate) fn new_zeroed<T: ZeroValid>() -> Result<KBox<T>> {
    let b = KBox::<T>::new_uninit(GFP_KERNEL | __GFP_ZERO)?;
    // SAFETY: The allocation is zero-filled and `T: ZeroValid`.
    Ok(unsafe { b.assume_init() })
}

/// A random 32-bit value from the kernel's CRNG (QP number salts, initial PSNs).
pub(crate) fn random_u32() -> u32 {
    // SAFETY: `get_random_u32` has no preconditions.
    unsafe { raw::get_random_u32() }
}
pub(crate) use netdev::{NetDev, NetdevEvent, NetdevNotifier};

/// Bytes of each CPU's staging buffer (see [`Staging`]).
static STAGING_LEN: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// The CPUs' staging buffers, one per possible CPU, where QP runs build their
/// packets (a buffer per QP of the largest packet cost every idle QP up to 64 KiB
/// at `rc_mtu=32768`); freed on drop, after every QP is gone.
pub(crate) struct Staging(());

impl Staging {
    /// Allocates one buffer of `len` zeroed bytes per possible CPU.
    pub(crate) fn new(len: usize) -> Result<Self> {
        // SAFETY: Called once from module init, before any QP exists.
        kernel::error::to_result(unsafe { raw::mrc_staging_alloc(len) })?;
        STAGING_LEN.store(len, core::sync::atomic::Ordering::Relaxed);
        Ok(Self(()))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: Allocated in `new`; no QP, hence no run, exists any more.
        unsafe { raw::mrc_staging_free() };
    }
}

/// This CPU's staging buffer.
///
/// # Safety
///
/// Bottom halves are off on this CPU for `'a` (the caller holds a QP's engine lock,
/// taken in process context or softirq, and keeps it for `'a`), and no other
/// result of this function is alive on this CPU meanwhile.
pub(crate) unsafe fn staging_this_cpu<'a>() -> &'a mut [u8] {
    // SAFETY: Per the contract bottom halves are off.
    let p = unsafe { raw::mrc_staging_this_cpu() };
    let len = STAGING_LEN.load(core::sync::atomic::Ordering::Relaxed);
    if p.is_null() {
        return &mut [];
    }
    // SAFETY: `p` is this CPU's buffer of `len` zeroed (initialised) bytes, alive
    // while the module is (`Staging`); with bottom halves off no other run on this
    // CPU can use it, and no other CPU uses this CPU's (contract).
    unsafe { core::slice::from_raw_parts_mut(p, len) }
}

/// The module's workqueue, on which every QP's work runs; destroyed on drop (after
/// every device, hence every QP, is gone).
pub(crate) struct Workqueue(());

impl Workqueue {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: Called once from module init.
        kernel::error::to_result(unsafe { raw::mrc_wq_init() })?;
        Ok(Self(()))
    }
}

impl Drop for Workqueue {
    fn drop(&mut self) {
        // SAFETY: Created in `new`; no QP (so no work item) exists any more.
        unsafe { raw::mrc_wq_fini() };
    }
}
