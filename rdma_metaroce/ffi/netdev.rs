// SPDX-License-Identifier: GPL-2.0

//! Network devices: a borrowed [`NetDev`] and the [`NetdevNotifier`] subscription.

use super::raw;
use super::PortState;
use core::ffi::{c_int, c_ulong, c_void, CStr};
use kernel::prelude::*;
use kernel::types::Opaque;

/// A `struct net_device` borrowed for the duration of a callback.
///
/// # Invariants
///
/// The wrapped `net_device` is alive for as long as the reference is.
#[repr(transparent)]
pub(crate) struct NetDev(Opaque<raw::net_device>);

/// Identity of a network device, usable as a key after the borrow ends.
///
/// It is never turned back into a pointer: it only compares equal to the [`NetDev::id`]
/// of the same device while that device exists.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetDevId(usize);

impl NetDev {
    /// Borrows a raw `net_device`.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a live `net_device` that stays alive for `'a` (the caller
    /// holds a reference, RTNL, or is inside a callback that guarantees it).
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut raw::net_device) -> &'a NetDev {
        // SAFETY: `NetDev` is `repr(transparent)` over `Opaque<net_device>`, and the
        // caller guarantees the device outlives `'a`.
        unsafe { &*ptr.cast::<NetDev>() }
    }

    pub(crate) fn as_ptr(&self) -> *mut raw::net_device {
        self.0.get()
    }

    /// Identity of this device.
    pub(crate) fn id(&self) -> NetDevId {
        NetDevId(self.as_ptr() as usize)
    }

    /// The interface name.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: By the type invariant the device is alive; `netdev_name` returns its
        // NUL-terminated name, which lives inside the device.
        unsafe { CStr::from_ptr(raw::mrc_netdev_name(self.as_ptr())) }
    }

    /// Whether the device carries Ethernet frames (`ARPHRD_ETHER`).
    pub(crate) fn is_ethernet(&self) -> bool {
        // SAFETY: By the type invariant the device is alive.
        let ty = unsafe { raw::mrc_netdev_type(self.as_ptr()) };
        u32::from(ty) == raw::ARPHRD_ETHER
    }

    /// The device's MTU in bytes.
    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: By the type invariant the device is alive.
        unsafe { raw::mrc_netdev_mtu(self.as_ptr()) }
    }

    /// The Ethernet hardware address, if the device has one.
    pub(crate) fn hw_addr(&self) -> Option<[u8; 6]> {
        let mut mac = [0u8; 6];
        // SAFETY: By the type invariant the device is alive; `mac` has room for the
        // six bytes the helper copies.
        let ok = unsafe { raw::mrc_netdev_hw_addr(self.as_ptr(), mac.as_mut_ptr()) };
        ok.then_some(mac)
    }

    /// Port state as RDMA sees it: active when the device is running with carrier.
    pub(crate) fn port_state(&self) -> PortState {
        // SAFETY: By the type invariant the device is alive.
        let state = unsafe { raw::mrc_netdev_port_state(self.as_ptr()) };
        if state == raw::ib_port_state_IB_PORT_ACTIVE {
            PortState::Active
        } else {
            PortState::Down
        }
    }
}

/// The netdev events the driver reacts to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NetdevEvent {
    /// The device is going away; every RDMA device bound to it must be unregistered.
    Unregister,
    /// The MTU changed.
    ChangeMtu,
    /// Anything else (ib_core itself follows up/down/carrier for port state).
    Other,
}

impl NetdevEvent {
    fn from_raw(event: c_ulong) -> Self {
        // `netdev_cmd` values are small; anything that does not fit is "other".
        match u32::try_from(event) {
            Ok(raw::netdev_cmd_NETDEV_UNREGISTER) => Self::Unregister,
            Ok(raw::netdev_cmd_NETDEV_CHANGEMTU) => Self::ChangeMtu,
            _ => Self::Other,
        }
    }
}

/// A registered netdevice notifier that forwards events to
/// [`crate::device::netdev_event`]. Unregistered when dropped.
///
/// # Invariants
///
/// `nb` is registered with the netdev layer from construction until drop.
#[pin_data(PinnedDrop)]
pub(crate) struct NetdevNotifier {
    #[pin]
    nb: Opaque<raw::notifier_block>,
}

// SAFETY: The notifier block is only touched by the netdev layer (under its own locks)
// and by `drop`; no interior data is shared with Rust code.
unsafe impl Send for NetdevNotifier {}
// SAFETY: See `Send`: `&NetdevNotifier` gives no access to the block.
unsafe impl Sync for NetdevNotifier {}

impl NetdevNotifier {
    /// Subscribes to netdev events.
    pub(crate) fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            nb <- Opaque::try_ffi_init(|slot: *mut raw::notifier_block| {
                // SAFETY: `slot` is valid for writes; a zeroed notifier block with a
                // callback set is the documented way to initialise one.
                unsafe {
                    slot.write(raw::notifier_block {
                        notifier_call: Some(netdev_event_cb),
                        ..Default::default()
                    });
                }
                // SAFETY: `slot` is pinned (it lives inside a pinned `Self`) and stays
                // registered until `drop` unregisters it.
                kernel::error::to_result(unsafe { raw::register_netdevice_notifier(slot) })
            }),
        })
    }
}

#[pinned_drop]
impl PinnedDrop for NetdevNotifier {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the block is registered.
        unsafe { raw::unregister_netdevice_notifier(self.nb.get()) };
    }
}

/// Trampoline for `notifier_block::notifier_call`.
///
/// # Safety
///
/// Called by the netdev layer with `ptr` pointing to a `netdev_notifier_info`.
unsafe extern "C" fn netdev_event_cb(
    _nb: *mut raw::notifier_block,
    event: c_ulong,
    ptr: *mut c_void,
) -> c_int {
    // SAFETY: The netdev notifier contract: `ptr` is a `netdev_notifier_info` whose device
    // is alive (RTNL is held) for the duration of the call.
    let ndev = unsafe { NetDev::from_raw(raw::mrc_notifier_netdev(ptr)) };
    crate::device::netdev_event(ndev, NetdevEvent::from_raw(event));
    raw::NOTIFY_DONE as c_int
}
