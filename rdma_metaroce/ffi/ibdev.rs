// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: allocation inside ib_core, the `ib_device_ops` table, and the
//! registry of this driver's live devices.

use super::{link::LinkOps, raw, NetDev};
use crate::device::DeviceData;
use core::ffi::{c_int, CStr};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::prelude::*;
use kernel::types::Opaque;

/// Port state as reported to ib_core.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PortState {
    /// Link up with carrier.
    Active,
    /// Link down.
    Down,
}

/// IBTA MTU codes (`enum ib_mtu`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum IbMtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

/// What `query_port` reports; chosen by the driver logic.
pub(crate) struct PortInfo {
    pub(crate) state: PortState,
    pub(crate) max_mtu: IbMtu,
    pub(crate) active_mtu: IbMtu,
    pub(crate) gid_tbl_len: u32,
    pub(crate) max_msg_sz: u32,
}

/// What `query_device` reports; chosen by the driver logic.
pub(crate) struct DeviceCaps {
    pub(crate) vendor_id: u32,
    pub(crate) vendor_part_id: u32,
    pub(crate) hw_ver: u32,
    pub(crate) fw_ver: u64,
    pub(crate) sys_image_guid_be: u64,
    pub(crate) max_mr_size: u64,
    pub(crate) page_size_cap: u64,
    pub(crate) max_qp: u32,
    pub(crate) max_qp_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) max_sge_rd: u32,
    pub(crate) max_cq: u32,
    pub(crate) max_cqe: u32,
    pub(crate) max_mr: u32,
    pub(crate) max_pd: u32,
    pub(crate) max_qp_rd_atom: u32,
    pub(crate) max_ah: u32,
    pub(crate) max_srq: u32,
    pub(crate) max_srq_wr: u32,
    pub(crate) max_srq_sge: u32,
    pub(crate) atomics: bool,
}

/// The allocation ib_core makes for each of this driver's devices: `struct ib_device`
/// first (ib_core requires it at offset 0), then the driver's data.
#[repr(C)]
struct DevAlloc {
    ib: raw::ib_device,
    data: DeviceData,
    /// The device's UDP socket on the MetaRoCE port (NULL until opened); closed in
    /// `dealloc_driver` before `data` is dropped.
    sock: *mut raw::socket,
    /// The IPv6 (v6-only) socket on the same port, or NULL when the namespace has no
    /// IPv6; closed with `sock`.
    sock6: *mut raw::socket,
    /// The MetaRoCE UDP port the socket listens on and packets are sent to.
    port: u16,
}

/// A `struct ib_device` of this driver, borrowed.
///
/// # Invariants
///
/// The device is the head of a [`DevAlloc`] whose `data` is initialised, and both stay
/// alive for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct IbDev(Opaque<raw::ib_device>);

impl IbDev {
    /// Borrows a raw device.
    ///
    /// # Safety
    ///
    /// `ptr` must be a device allocated by [`IbDev::create`] whose data has not been
    /// dropped, alive for `'a`. Every ib_core callback installed by [`OPS`] satisfies
    /// this: ib_core only invokes a device's ops on that device, and `dealloc_driver` is
    /// the last call.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut raw::ib_device) -> &'a IbDev {
        // SAFETY: `IbDev` is `repr(transparent)` over `Opaque<ib_device>`; the caller
        // guarantees the rest.
        unsafe { &*ptr.cast::<IbDev>() }
    }

    fn as_ptr(&self) -> *mut raw::ib_device {
        self.0.get()
    }

    /// The raw device, for calls made by the FFI layer.
    pub(super) fn as_raw(&self) -> *mut raw::ib_device {
        self.as_ptr()
    }

    /// The device's UDP socket (open from creation until `dealloc_driver`, so for as
    /// long as any QP of the device exists).
    pub(super) fn sock(&self) -> *mut raw::socket {
        // SAFETY: `self` heads a live `DevAlloc` (type invariant).
        unsafe { (*self.as_ptr().cast::<DevAlloc>()).sock }
    }

    /// The device's IPv6 socket, NULL if it has none (same lifetime as `sock`).
    pub(super) fn sock6(&self) -> *mut raw::socket {
        // SAFETY: `self` heads a live `DevAlloc` (type invariant).
        unsafe { (*self.as_ptr().cast::<DevAlloc>()).sock6 }
    }

    /// The MetaRoCE UDP port of this device.
    pub(super) fn udp_port(&self) -> u16 {
        // SAFETY: `self` heads a live `DevAlloc` (type invariant); set before
        // registration, never changed.
        unsafe { (*self.as_ptr().cast::<DevAlloc>()).port }
    }

    /// The driver data of this device.
    pub(crate) fn data(&self) -> &DeviceData {
        // SAFETY: By the type invariant `self` heads a live `DevAlloc` with initialised
        // data, and the data is only dropped in `dealloc_driver` when no borrow remains.
        unsafe { &(*self.as_ptr().cast::<DevAlloc>()).data }
    }

    /// The device name (`mrc0`); empty until ib_core assigned it at registration.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `name` is a NUL-terminated array inside the live device (zeroed at
        // allocation, written with a terminator by ib_core).
        unsafe { CStr::from_ptr((*self.as_ptr()).name.as_ptr()) }
    }

    /// Runs `f` with the network device bound to port 1, if any.
    pub(crate) fn with_netdev<R>(&self, f: impl FnOnce(&NetDev) -> R) -> Option<R> {
        // SAFETY: The device is alive (type invariant); ib_device_get_netdev returns a
        // held reference or NULL.
        let ndev = unsafe { raw::ib_device_get_netdev(self.as_ptr(), 1) };
        if ndev.is_null() {
            return None;
        }
        // SAFETY: We hold a reference on `ndev` until the `dev_put` below.
        let r = f(unsafe { NetDev::from_raw(ndev) });
        // SAFETY: Drops the reference taken by ib_device_get_netdev.
        unsafe { raw::mrc_dev_put(ndev) };
        Some(r)
    }

    /// Creates, registers and publishes a new device named `name` on `ndev`.
    ///
    /// Fails with `EEXIST` if `ndev` already carries a device of this driver.
    pub(crate) fn create(name: &CStr, ndev: &NetDev, data: DeviceData, node_guid_be: u64, udp_port: u16) -> Result {
        // SAFETY: `ndev` is alive (borrowed); the helper returns a zeroed allocation of
        // the requested size headed by an initialised `ib_device`, or NULL.
        let ib = unsafe { raw::mrc_ib_alloc_device(core::mem::size_of::<DevAlloc>(), ndev.as_ptr()) };
        let ib = NonNull::new(ib).ok_or(ENOMEM)?;
        let alloc = ib.as_ptr().cast::<DevAlloc>();
        // SAFETY: `alloc` is a fresh, exclusively owned allocation of `DevAlloc` size;
        // the data slot is written exactly once before any op can run.
        unsafe { (&raw mut (*alloc).data).write(data) };
        // SAFETY: The device is exclusively ours until registered; `OPS` is static.
        // From here on `dealloc_driver` drops `data` whenever the device is freed.
        unsafe {
            raw::ib_set_device_ops(ib.as_ptr(), &OPS.0);
            let dev = &mut *ib.as_ptr();
            dev.ops.owner = raw::mrc_this_module();
            dev.node_type = raw::RDMA_NODE_IB_CA as u8;
            dev.phys_port_cnt = 1;
            dev.num_comp_vectors = raw::mrc_num_possible_cpus() as c_int;
            dev.node_guid = node_guid_be;
            dev.link_ops = LinkOps::ops_ptr();
            // The command-based provider (user ABI v1) posts and polls through these
            // uverbs write commands, which ib_core leaves disabled unless asked.
            for cmd in [
                raw::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POLL_CQ,
                raw::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
                raw::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND,
                raw::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_RECV,
                raw::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SRQ_RECV,
            ] {
                dev.uverbs_cmd_mask |= 1u64 << cmd;
            }
            let desc = b"MetaRoCE\0";
            for (d, s) in dev.node_desc.iter_mut().zip(desc.iter()) {
                *d = *s as _;
            }
        }

        let undo = |err: Error| -> Error {
            // SAFETY: Registration did not succeed, so ib_core requires the driver to
            // free the device; `dealloc_driver` then drops `data` and unpublishes it.
            unsafe { raw::ib_dealloc_device(ib.as_ptr()) };
            err
        };

        let parent = PARENT.load(Ordering::Acquire);
        if !parent.is_null() {
            // SAFETY: The parent device outlives every ib_device (module exit unregisters
            // all devices before the parent); the ib_device is not registered yet.
            unsafe { raw::mrc_ib_set_parent(ib.as_ptr(), parent) };
        }
        registry_insert(ib, ndev.id()).map_err(undo)?;
        let mut err: c_int = 0;
        // SAFETY: `ndev` is alive; the socket's user data is this device, which
        // outlives the socket (closed, waiting for in-flight callbacks, in
        // `dealloc_driver` before anything else is freed).
        let sock = unsafe {
            raw::mrc_udp_open(ndev.as_ptr(), udp_port, ib.as_ptr().cast(), Some(super::net::udp_rcv_cb), &mut err)
        };
        if sock.is_null() {
            return Err(undo(Error::from_errno(err)));
        }
        // SAFETY: Exclusively ours until registered.
        unsafe {
            (*alloc).sock = sock;
            (*alloc).port = udp_port;
        }
        // SAFETY: As for the IPv4 socket.
        let sock6 = unsafe {
            raw::mrc_udp_open6(ndev.as_ptr(), udp_port, ib.as_ptr().cast(), Some(super::net::udp_rcv_cb), &mut err)
        };
        if sock6.is_null() {
            // IPv6 disabled in this namespace: IPv4 peers still work.
            pr_info!("no IPv6 socket on {:?} (error {}): IPv4 only\n", ndev.name(), err);
        }
        // SAFETY: Exclusively ours until registered.
        unsafe { (*alloc).sock6 = sock6 };
        // SAFETY: Both are alive; ib_core takes its own netdev reference.
        let ret = unsafe { raw::ib_device_set_netdev(ib.as_ptr(), ndev.as_ptr(), 1) };
        kernel::error::to_result(ret).map_err(undo)?;
        // SAFETY: The device is fully initialised; `name` is NUL-terminated.
        let ret = unsafe { raw::ib_register_device(ib.as_ptr(), name.as_ptr(), core::ptr::null_mut()) };
        kernel::error::to_result(ret).map_err(undo)?;
        registry_mark_registered(ib);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// The parent device.

/// The `rdma_metaroce` platform device all ib_devices hang under; set while a
/// [`ParentDevice`] exists.
static PARENT: AtomicPtr<raw::device> = AtomicPtr::new(core::ptr::null_mut());

/// Owner of the platform device `rdma_metaroce`, the parent of every MetaRoCE
/// ib_device. Userspace (the rdma-core provider) recognises MetaRoCE devices by its
/// modalias, `platform:rdma_metaroce`, whatever the device's name.
///
/// # Invariants
///
/// `PARENT` holds the registered device from construction until drop.
pub(crate) struct ParentDevice(());

impl ParentDevice {
    /// Registers the platform device (module init, once).
    pub(crate) fn register() -> Result<Self> {
        // SAFETY: Plain registration of a resource-less platform device.
        let dev = unsafe { raw::mrc_parent_register() };
        if dev.is_null() {
            return Err(ENOMEM);
        }
        PARENT.store(dev, Ordering::Release);
        Ok(Self(()))
    }
}

impl Drop for ParentDevice {
    fn drop(&mut self) {
        let dev = PARENT.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !dev.is_null() {
            // SAFETY: Registered in `register`; by the module's teardown order no
            // ib_device refers to it any more.
            unsafe { raw::mrc_parent_unregister(dev) };
        }
    }
}

// ---------------------------------------------------------------------------------
// Registry of live devices.

/// One published device.
struct Entry {
    ib: NonNull<raw::ib_device>,
    netdev: super::netdev::NetDevId,
    registered: bool,
}

// SAFETY: `ib` is only dereferenced by ib_core functions that are safe to call from any
// thread; the entry is removed (under the registry lock) before the device is freed.
unsafe impl Send for Entry {}

kernel::sync::global_lock! {
    // SAFETY: `registry_init` runs in module init before any other use.
    unsafe(uninit) static DEVICES: Mutex<KVec<Entry>> = KVec::new();
}

/// Initialises the registry. Called once, from module init.
pub(crate) fn registry_init() {
    // SAFETY: Called exactly once, from module init, before any device can exist.
    unsafe { DEVICES.init() };
}

fn registry_insert(ib: NonNull<raw::ib_device>, netdev: super::netdev::NetDevId) -> Result {
    let mut devices = DEVICES.lock();
    if devices.iter().any(|e| e.netdev == netdev) {
        return Err(EEXIST);
    }
    devices.push(Entry { ib, netdev, registered: false }, GFP_KERNEL)?;
    Ok(())
}

fn registry_mark_registered(ib: NonNull<raw::ib_device>) {
    let mut devices = DEVICES.lock();
    if let Some(e) = devices.iter_mut().find(|e| e.ib == ib) {
        e.registered = true;
    }
}

fn registry_remove(ib: *mut raw::ib_device) {
    let mut devices = DEVICES.lock();
    if let Some(i) = devices.iter().position(|e| e.ib.as_ptr() == ib) {
        let _ = devices.remove(i);
    }
}

/// Starts (asynchronous) unregistration of this driver's registered devices on `ndev`.
/// Safe to call with RTNL held: nothing here sleeps beyond the registry mutex.
pub(crate) fn unregister_on_netdev(ndev: &NetDev) -> usize {
    let devices = DEVICES.lock();
    let mut n = 0;
    for e in devices.iter().filter(|e| e.registered && e.netdev == ndev.id()) {
        // SAFETY: The entry is in the registry, so the device memory is alive (entries
        // are removed under this lock before it is freed). Queue the unregistration only
        // while the device still holds its registration reference: a device already
        // being unregistered (rdma link del, rmmod) has refcount 0 and must be left alone.
        unsafe {
            if raw::mrc_ib_device_try_get(e.ib.as_ptr()) {
                raw::ib_unregister_device_queued(e.ib.as_ptr());
                raw::ib_device_put(e.ib.as_ptr());
                n += 1;
            }
        }
    }
    n
}

/// Unregisters every device of this driver and waits until each is freed, then frees
/// the registry's own storage (a static is never dropped, so its vector would
/// otherwise outlive the module). Called once, at module exit, after the link type is
/// unregistered, so no new device can appear.
pub(crate) fn unregister_all() {
    loop {
        let ib = {
            let mut devices = DEVICES.lock();
            let Some(e) = devices.first() else {
                *devices = KVec::new();
                return;
            };
            let ib = e.ib.as_ptr();
            // SAFETY: The device is alive while its entry is in the registry; pin its
            // memory before dropping the lock.
            unsafe { raw::get_device(&raw mut (*ib).__bindgen_anon_1.dev) };
            ib
        };
        // SAFETY: Memory pinned above. ib_unregister_device is fenced against concurrent
        // (queued) unregistration by ib_core's unregistration lock; when it returns the
        // device was unregistered and `dealloc_driver` removed the entry.
        unsafe {
            raw::ib_unregister_device(ib);
            raw::put_device(&raw mut (*ib).__bindgen_anon_1.dev);
        }
    }
}

// ---------------------------------------------------------------------------------
// The ops table and its trampolines.

/// `ib_device_ops` in a static: ib_core only reads it (copying into each device).
struct StaticOps(raw::ib_device_ops);

// SAFETY: The table is immutable and only read; its pointers are to functions and NULL.
unsafe impl Sync for StaticOps {}

/// Ops of every device of this driver. `owner` is set per device at creation.
static OPS: StaticOps = StaticOps({
    // SAFETY: All-zero is a valid `ib_device_ops` (NULL pointers, zero sizes).
    let mut ops: raw::ib_device_ops = unsafe { core::mem::zeroed() };
    ops.driver_id = raw::rdma_driver_id_RDMA_DRIVER_UNKNOWN;
    ops.uverbs_abi_ver = 1;
    ops.query_device = Some(query_device_cb);
    ops.query_port = Some(query_port_cb);
    ops.get_port_immutable = Some(get_port_immutable_cb);
    ops.get_link_layer = Some(get_link_layer_cb);
    ops.query_pkey = Some(query_pkey_cb);
    ops.dealloc_driver = Some(dealloc_driver_cb);
    ops.alloc_hw_port_stats = Some(super::net::alloc_hw_port_stats_cb);
    ops.get_hw_stats = Some(super::net::get_hw_stats_cb);
    super::verbs::install(ops)
});

unsafe extern "C" fn query_device_cb(
    ib: *mut raw::ib_device,
    attr: *mut raw::ib_device_attr,
    udata: *mut raw::ib_udata,
) -> c_int {
    // SAFETY: ib_core calls this op only on devices of this driver (see `from_raw`).
    let dev = unsafe { IbDev::from_raw(ib) };
    // SAFETY: ib_core passes NULL or a valid udata for the call.
    if unsafe { has_driver_data(udata) } {
        return EINVAL.to_errno();
    }
    let c = crate::device::device_caps(dev);
    // SAFETY: `attr` points to a caller-owned `ib_device_attr` for the duration of the call.
    let a = unsafe { &mut *attr };
    a.vendor_id = c.vendor_id;
    a.vendor_part_id = c.vendor_part_id;
    a.hw_ver = c.hw_ver;
    a.fw_ver = c.fw_ver;
    a.sys_image_guid = c.sys_image_guid_be;
    a.max_mr_size = c.max_mr_size;
    a.page_size_cap = c.page_size_cap;
    a.max_qp = clamp(c.max_qp);
    a.max_qp_wr = clamp(c.max_qp_wr);
    a.max_send_sge = clamp(c.max_sge);
    a.max_recv_sge = clamp(c.max_sge);
    a.max_sge_rd = clamp(c.max_sge_rd);
    a.max_cq = clamp(c.max_cq);
    a.max_cqe = clamp(c.max_cqe);
    a.max_mr = clamp(c.max_mr);
    // Memory windows take their keys from the regions' table (spec MR-9.2.4).
    a.max_mw = clamp(c.max_mr);
    a.max_pd = clamp(c.max_pd);
    a.max_qp_rd_atom = clamp(c.max_qp_rd_atom);
    a.max_qp_init_rd_atom = clamp(c.max_qp_rd_atom);
    a.max_res_rd_atom = clamp(c.max_qp_rd_atom.saturating_mul(c.max_qp));
    a.max_ah = clamp(c.max_ah);
    a.max_srq = clamp(c.max_srq);
    a.max_srq_wr = clamp(c.max_srq_wr);
    a.max_srq_sge = clamp(c.max_srq_sge);
    a.max_pkeys = 1;
    // UD multicast (spec MR-3.6.3).
    a.max_mcast_grp = crate::mcast::MAX_GROUPS as c_int;
    a.max_mcast_qp_attach = crate::mcast::MAX_GROUP_QPS as c_int;
    a.max_total_mcast_qp_attach = (crate::mcast::MAX_GROUPS * crate::mcast::MAX_GROUP_QPS) as c_int;
    a.atomic_cap = if c.atomics {
        raw::ib_atomic_cap_IB_ATOMIC_HCA
    } else {
        raw::ib_atomic_cap_IB_ATOMIC_NONE
    };
    // `rdma link del` must be allowed for software devices.
    a.kernel_cap_flags = u64::from(raw::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG);
    // Fast-registration MRs (REG_MR / LOCAL_INV / SEND_WITH_INV) for kernel ULPs.
    a.device_cap_flags |= u64::from(raw::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS);
    a.max_fast_reg_page_list_len = crate::mr::MAX_FRMR_PAGES;
    // Memory windows of type 1 and 2B (bound to the QP that binds them).
    a.device_cap_flags |= u64::from(raw::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW);
    a.device_cap_flags |= u64::from(raw::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B);
    // `ibv_modify_srq` with `IBV_SRQ_MAX_WR` (`Srq::modify`).
    a.device_cap_flags |= u64::from(raw::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE);
    // IBTA 1.5 ATOMIC WRITE (spec MR-4.4.6).
    a.device_cap_flags |= u64::from(raw::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE);
    // FLUSH for global visibility (spec MR-4.4.7); not for persistence: no region
    // is persistent memory, so ib_core refuses IB_ACCESS_FLUSH_PERSISTENT.
    a.device_cap_flags |= u64::from(raw::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL);
    // On-demand paging (spec MR-9.2.5), where the kernel has it: explicit regions
    // (not the implicit, whole-address-space kind), for every operation.
    // SAFETY: No preconditions.
    if unsafe { raw::mrc_odp_supported() } {
        a.kernel_cap_flags |= u64::from(raw::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING);
        a.odp_caps.general_caps = u64::from(raw::ib_odp_general_cap_bits_IB_ODP_SUPPORT);
        let common = raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV;
        let t = &mut a.odp_caps.per_transport_caps;
        t.rc_odp_caps = common
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_FLUSH
            | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC_WRITE;
        t.uc_odp_caps = common | raw::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE;
        t.ud_odp_caps = common;
    }
    0
}

/// Whether a user call carries driver-private request or response data. User ABI v1
/// defines none, so any is a malformed request (`EINVAL`).
///
/// # Safety
///
/// `udata` must be NULL or point to a valid `ib_udata` for the duration of the call.
pub(super) unsafe fn has_driver_data(udata: *const raw::ib_udata) -> bool {
    // SAFETY: Per the contract.
    unsafe { udata.as_ref() }.is_some_and(|u| u.inlen != 0 || u.outlen != 0)
}

fn clamp(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

unsafe extern "C" fn query_port_cb(
    ib: *mut raw::ib_device,
    port: u32,
    attr: *mut raw::ib_port_attr,
) -> c_int {
    if port != 1 {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core calls this op only on devices of this driver.
    let dev = unsafe { IbDev::from_raw(ib) };
    let p = crate::device::port_info(dev);
    // SAFETY: `attr` points to a caller-owned, zeroed `ib_port_attr` for the call.
    let a = unsafe { &mut *attr };
    let active = p.state == PortState::Active;
    a.state = if active {
        raw::ib_port_state_IB_PORT_ACTIVE
    } else {
        raw::ib_port_state_IB_PORT_DOWN
    };
    a.phys_state = if active {
        raw::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8
    } else {
        raw::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8
    };
    a.max_mtu = p.max_mtu as u32;
    a.active_mtu = p.active_mtu as u32;
    a.gid_tbl_len = clamp(p.gid_tbl_len);
    a.port_cap_flags = raw::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = 1;
    a.max_vl_num = 1;
    // SAFETY: Device alive; the out-pointers are fields of `*attr`. A failure leaves
    // ib_core's defaults, which is what a netdev without link settings should report.
    unsafe { raw::ib_get_eth_speed(ib, port, &mut a.active_speed, &mut a.active_width) };
    0
}

unsafe extern "C" fn get_port_immutable_cb(
    ib: *mut raw::ib_device,
    port: u32,
    imm: *mut raw::ib_port_immutable,
) -> c_int {
    if port != 1 {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core calls this op only on devices of this driver.
    let dev = unsafe { IbDev::from_raw(ib) };
    let p = crate::device::port_info(dev);
    // SAFETY: `imm` points to a caller-owned struct for the call.
    let imm = unsafe { &mut *imm };
    // RoCE v2-style GIDs (IP addresses of the netdev) let rdma_cm and NCCL address us;
    // the packets themselves are MetaRoCE, on MetaRoCE's own UDP port.
    imm.core_cap_flags = raw::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
    imm.pkey_tbl_len = 1;
    imm.gid_tbl_len = clamp(p.gid_tbl_len);
    imm.max_mad_size = raw::IB_MGMT_MAD_SIZE;
    0
}

unsafe extern "C" fn get_link_layer_cb(_ib: *mut raw::ib_device, _port: u32) -> raw::rdma_link_layer {
    raw::rdma_link_layer_IB_LINK_LAYER_ETHERNET
}

unsafe extern "C" fn query_pkey_cb(_ib: *mut raw::ib_device, _port: u32, index: u16, pkey: *mut u16) -> c_int {
    if index != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: `pkey` points to a caller-owned u16 for the call.
    unsafe { pkey.write(0xffff) };
    0
}

unsafe extern "C" fn dealloc_driver_cb(ib: *mut raw::ib_device) {
    {
        // SAFETY: ib_core calls this op once, last, on devices of this driver.
        let dev = unsafe { IbDev::from_raw(ib) };
        crate::device::on_dealloc(dev);
    }
    registry_remove(ib);
    let alloc = ib.cast::<DevAlloc>();
    // SAFETY: Last callback for the device: nobody else uses `sock`. Closing waits
    // until no receive callback (which reads `data`) can still run.
    unsafe {
        for slot in [&raw mut (*alloc).sock, &raw mut (*alloc).sock6] {
            let sock = *slot;
            if !sock.is_null() {
                *slot = core::ptr::null_mut();
                raw::mrc_udp_close(sock);
            }
        }
    }
    // SAFETY: This is the last callback for the device; the data was initialised in
    // `create` and no reference to it remains (the borrow above ended).
    unsafe { core::ptr::drop_in_place(&raw mut (*alloc).data) };
}


/// Aborts the build if `ib_device` is not at offset 0 of `DevAlloc`.
const _: () = assert!(core::mem::offset_of!(DevAlloc, ib) == 0);

