// SPDX-License-Identifier: GPL-2.0

//! The `rdma link` type `metaroce`: `rdma link add NAME type metaroce netdev DEV`.

use super::{raw, IbDev, NetDev};
use core::ffi::{c_char, c_int, CStr};
use kernel::types::Opaque;

/// The link type name users pass to `rdma link add ... type`.
pub(crate) const LINK_TYPE: &CStr = c"metaroce";

/// The `rdma_link_ops` ib_core keeps on its list while registered.
struct StaticLinkOps(Opaque<raw::rdma_link_ops>);

// SAFETY: After construction the ops are only written by ib_core (its list linkage,
// under `link_ops_rwsem`); Rust only passes their address.
unsafe impl Sync for StaticLinkOps {}

static LINK_OPS: StaticLinkOps = StaticLinkOps(Opaque::new(raw::rdma_link_ops {
    list: raw::list_head {
        next: core::ptr::null_mut(),
        prev: core::ptr::null_mut(),
    },
    type_: LINK_TYPE.as_ptr(),
    newlink: Some(newlink_cb),
    dellink: Some(dellink_cb),
}));

/// The registration of the `metaroce` link type with ib_core's netlink interface.
///
/// # Invariants
///
/// While a `LinkOps` exists, [`LINK_OPS`] is on ib_core's list. At most one exists
/// (it is owned by the module).
pub(crate) struct LinkOps(());

impl LinkOps {
    /// Registers the link type. Must be called at most once at a time (module init).
    pub(crate) fn register() -> Self {
        // SAFETY: `LINK_OPS` is static, so it outlives the registration; the module owns
        // the single `LinkOps` and unregisters in `drop`.
        unsafe { raw::rdma_link_register(LINK_OPS.0.get()) };
        Self(())
    }

    /// The address ib_core compares against `ib_device::link_ops` on `rdma link del`.
    pub(crate) fn ops_ptr() -> *const raw::rdma_link_ops {
        LINK_OPS.0.get()
    }
}

impl Drop for LinkOps {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the ops are registered. `rdma_link_unregister`
        // takes ib_core's rwsem for writing, so no `newlink` is running once it returns.
        unsafe { raw::rdma_link_unregister(LINK_OPS.0.get()) };
    }
}

/// Trampoline for `rdma_link_ops::newlink`.
///
/// # Safety
///
/// Called by ib_core's netlink handler with a NUL-terminated name and a referenced netdev.
unsafe extern "C" fn newlink_cb(ibdev_name: *const c_char, ndev: *mut raw::net_device) -> c_int {
    // SAFETY: nldev_newlink passes a NUL-terminated name it owns for the call.
    let name = unsafe { CStr::from_ptr(ibdev_name) };
    // SAFETY: nldev_newlink holds a reference on `ndev` for the duration of the call.
    let ndev = unsafe { NetDev::from_raw(ndev) };
    match crate::device::newlink(name, ndev) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Trampoline for `rdma_link_ops::dellink`.
///
/// # Safety
///
/// Called by ib_core with a registered device of this driver (its `link_ops` is ours).
unsafe extern "C" fn dellink_cb(ibdev: *mut raw::ib_device) -> c_int {
    // SAFETY: ib_core only calls our dellink for devices whose `link_ops` points at
    // `LINK_OPS`, i.e. devices this driver allocated; it holds a registration reference.
    let dev = unsafe { IbDev::from_raw(ibdev) };
    match crate::device::dellink(dev) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
