// SPDX-License-Identifier: GPL-2.0

//! Verbs objects whose memory ib_core allocates for the driver — user contexts,
//! protection domains and completion queues: their layouts (ib_core's struct first,
//! then the driver's data), the object sizes ib_core needs, and the op trampolines.

use super::raw;
use crate::cq::{wc_opcode_raw, Arm, Cq, CqStorage, WcOpcode, WcStatus};
use crate::qp::{Qp, QpCaps, QpState, QpType, QpUpdate};
use crate::srq::{Srq, SrqAttrs};
use super::IbDev;
use super::datapath::{qp_start, qp_stop, KernelVa, Umem};
use crate::engine::Engine;
use crate::mr::{Accessor, Backing, MrEntry, PageList, PdId, QpId, Window, ACCESS_ON_DEMAND, MAX_FRMR_PAGES};
use super::OdpMem;
use core::ffi::c_int;
use core::ptr::NonNull;
use kernel::prelude::*;

/// A completion queue allocation: `struct ib_cq` first (ib_core requires it at
/// offset 0), then the driver's [`Cq`].
#[repr(C)]
struct CqAlloc {
    ib: raw::ib_cq,
    cq: Cq,
}

const _: () = assert!(core::mem::offset_of!(CqAlloc, ib) == 0);

/// A queue pair allocation: `struct ib_qp` first, then the driver's [`Qp`] and the
/// QP's work context (see `datapath`).
#[repr(C)]
struct QpAlloc {
    ib: raw::ib_qp,
    qp: Qp,
    io: *mut raw::mrc_qp_io,
}

const _: () = assert!(core::mem::offset_of!(QpAlloc, ib) == 0);

/// An address handle: `struct ib_ah` first, then the destination it names (the peer's
/// GID: an IPv4-mapped or IPv6 address) and the local GID index to send from.
#[repr(C)]
struct AhAlloc {
    ib: raw::ib_ah,
    dgid: [u8; 16],
    sgid_index: u8,
}

const _: () = assert!(core::mem::offset_of!(AhAlloc, ib) == 0);

/// A shared receive queue allocation: `struct ib_srq` first, then the driver's [`Srq`].
#[repr(C)]
struct SrqAlloc {
    ib: raw::ib_srq,
    srq: Srq,
}

const _: () = assert!(core::mem::offset_of!(SrqAlloc, ib) == 0);

/// A memory region: the driver allocates it (ib_core has no size for MRs) and hands
/// ib_core the embedded `struct ib_mr`. Its pinned pages belong to the device's MR
/// table entry under the same key.
#[repr(C)]
struct MrAlloc {
    ib: raw::ib_mr,
    /// A fast-registration MR's page list as `ib_map_mr_sg` last built it
    /// (capacity `max_num_sg`, fixed at allocation; empty for other MRs). The
    /// consumer serialises mapping and posting the REG_MR that copies it.
    pages: KVec<u64>,
}

const _: () = assert!(core::mem::offset_of!(MrAlloc, ib) == 0);

/// `ERR_PTR(errno)` for ops that return object pointers.
fn err_ptr<T>(e: Error) -> *mut T {
    e.to_errno() as isize as *mut T
}

/// Adds the verbs-object ops and object sizes to the device's ops table.
pub(super) const fn install(mut ops: raw::ib_device_ops) -> raw::ib_device_ops {
    ops.size_ib_ucontext = core::mem::size_of::<raw::ib_ucontext>();
    ops.alloc_ucontext = Some(alloc_ucontext_cb);
    ops.dealloc_ucontext = Some(dealloc_ucontext_cb);
    ops.disassociate_ucontext = Some(disassociate_ucontext_cb);
    ops.mmap = Some(raw::mrc_mmap);
    ops.mmap_free = Some(raw::mrc_mmap_free);
    ops.size_ib_pd = core::mem::size_of::<raw::ib_pd>();
    ops.alloc_pd = Some(alloc_pd_cb);
    ops.dealloc_pd = Some(dealloc_pd_cb);
    ops.size_ib_cq = core::mem::size_of::<CqAlloc>();
    ops.create_cq = Some(create_cq_cb);
    ops.destroy_cq = Some(destroy_cq_cb);
    ops.resize_user_cq = Some(resize_user_cq_cb);
    ops.poll_cq = Some(poll_cq_cb);
    ops.req_notify_cq = Some(req_notify_cq_cb);
    ops.size_ib_qp = core::mem::size_of::<QpAlloc>();
    ops.create_qp = Some(create_qp_cb);
    ops.modify_qp = Some(modify_qp_cb);
    ops.query_qp = Some(query_qp_cb);
    ops.destroy_qp = Some(destroy_qp_cb);
    ops.attach_mcast = Some(attach_mcast_cb);
    ops.detach_mcast = Some(detach_mcast_cb);
    ops.size_ib_srq = core::mem::size_of::<SrqAlloc>();
    ops.create_srq = Some(create_srq_cb);
    ops.modify_srq = Some(modify_srq_cb);
    ops.query_srq = Some(query_srq_cb);
    ops.destroy_srq = Some(destroy_srq_cb);
    ops.size_ib_ah = core::mem::size_of::<AhAlloc>();
    ops.create_ah = Some(create_ah_cb);
    ops.create_user_ah = Some(create_ah_cb);
    ops.query_ah = Some(query_ah_cb);
    ops.destroy_ah = Some(destroy_ah_cb);
    ops.fill_res_qp_entry = Some(fill_res_qp_entry_cb);
    ops.post_send = Some(super::datapath::post_send_cb);
    ops.post_recv = Some(super::datapath::post_recv_cb);
    ops.post_srq_recv = Some(super::datapath::post_srq_recv_cb);
    ops.reg_user_mr = Some(reg_user_mr_cb);
    ops.get_dma_mr = Some(get_dma_mr_cb);
    ops.alloc_mr = Some(alloc_mr_cb);
    ops.map_mr_sg = Some(map_mr_sg_cb);
    ops.dereg_mr = Some(dereg_mr_cb);
    ops.advise_mr = Some(advise_mr_cb);
    ops.size_ib_mw = core::mem::size_of::<raw::ib_mw>();
    ops.alloc_mw = Some(alloc_mw_cb);
    ops.dealloc_mw = Some(dealloc_mw_cb);
    ops
}

/// The driver's SRQ inside an ib_core SRQ.
///
/// # Safety
///
/// `ib` must be an SRQ of this driver between a successful create and its destroy.
unsafe fn srq<'a>(ib: *mut raw::ib_srq) -> &'a Srq {
    // SAFETY: Per the contract `ib` heads a live `SrqAlloc` with an initialised `srq`.
    unsafe { &(*ib.cast::<SrqAlloc>()).srq }
}

unsafe extern "C" fn create_srq_cb(
    ib: *mut raw::ib_srq,
    init: *mut raw::ib_srq_init_attr,
    _udata: *mut raw::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a valid init struct for the call.
    let init = unsafe { &mut *init };
    if init.srq_type != raw::ib_srq_type_IB_SRQT_BASIC {
        return NEG_EOPNOTSUPP;
    }
    let a = SrqAttrs {
        max_wr: init.attr.max_wr,
        max_sge: init.attr.max_sge,
        limit: init.attr.srq_limit,
    };
    let pi = match Srq::new(a) {
        Ok(pi) => pi,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: `ib` heads a zeroed allocation of size_of::<SrqAlloc>() bytes owned by
    // this call; the slot is initialised once and dropped in `destroy_srq`.
    let Ok(()) = unsafe { pi.__pinned_init(&raw mut (*ib.cast::<SrqAlloc>()).srq) };
    0
}

unsafe extern "C" fn modify_srq_cb(
    ib: *mut raw::ib_srq,
    attr: *mut raw::ib_srq_attr,
    mask: raw::ib_srq_attr_mask,
    udata: *mut raw::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes NULL or a valid udata for the call.
    if unsafe { super::ibdev::has_driver_data(udata) } {
        return EINVAL.to_errno();
    }
    // SAFETY: Valid attribute struct and a live SRQ of this driver.
    let (a, s) = unsafe { (&*attr, srq(ib)) };
    let resize = (mask & raw::ib_srq_attr_mask_IB_SRQ_MAX_WR != 0).then_some(a.max_wr);
    let limit = (mask & raw::ib_srq_attr_mask_IB_SRQ_LIMIT != 0).then_some(a.srq_limit);
    match s.modify(resize, limit) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

unsafe extern "C" fn query_srq_cb(ib: *mut raw::ib_srq, attr: *mut raw::ib_srq_attr) -> c_int {
    // SAFETY: A live SRQ of this driver and a caller-owned output struct.
    let (s, out) = unsafe { (srq(ib).attrs(), &mut *attr) };
    out.max_wr = s.max_wr;
    out.max_sge = s.max_sge;
    out.srq_limit = s.limit;
    0
}

unsafe extern "C" fn destroy_srq_cb(ib: *mut raw::ib_srq, _udata: *mut raw::ib_udata) -> c_int {
    // SAFETY: ib_core destroys once, after a successful create, with no op running.
    unsafe { core::ptr::drop_in_place(&raw mut (*ib.cast::<SrqAlloc>()).srq) };
    0
}

unsafe extern "C" fn create_ah_cb(
    ib: *mut raw::ib_ah,
    init: *mut raw::rdma_ah_init_attr,
    _udata: *mut raw::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a valid init struct whose `ah_attr` is valid for the call.
    let attr = unsafe { &*(*init).ah_attr };
    // MetaRoCE addresses peers by IP: an address vector without a GRH names nobody.
    if u32::from(attr.ah_flags) & raw::ib_ah_flags_IB_AH_GRH == 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: `ib` heads a zeroed allocation of size_of::<AhAlloc>() bytes owned by
    // this call; plain data, nothing to drop. `dgid` is a 16-byte union.
    unsafe {
        let a = ib.cast::<AhAlloc>();
        (*a).dgid = attr.grh.dgid.raw;
        (*a).sgid_index = attr.grh.sgid_index;
    }
    0
}

unsafe extern "C" fn query_ah_cb(ib: *mut raw::ib_ah, out: *mut raw::rdma_ah_attr) -> c_int {
    // SAFETY: `ib` is a live AH of this driver; `out` is caller-owned for the call.
    unsafe {
        let a = &*ib.cast::<AhAlloc>();
        (*out).ah_flags = raw::ib_ah_flags_IB_AH_GRH as u8;
        (*out).port_num = 1;
        (*out).grh.dgid.raw = a.dgid;
        (*out).grh.sgid_index = a.sgid_index;
    }
    0
}

unsafe extern "C" fn destroy_ah_cb(_ib: *mut raw::ib_ah, _flags: u32) -> c_int {
    // Plain data inside ib_core's allocation: nothing to release.
    0
}

/// Creates an MR object with fresh keys and publishes it to the data path; `umem`
/// (NULL for the DMA MR) is owned by the MR table from now on (released here on
/// failure).
fn new_mr(dev: &IbDev, pd: *mut raw::ib_pd, access: u32, umem: *mut raw::ib_umem, iova: u64, length: u64) -> *mut raw::ib_mr {
    let mem = match NonNull::new(umem) {
        // SAFETY: `umem` came from `mrc_umem_get` and nothing else owns it.
        Some(p) => Backing::User(unsafe { Umem::from_raw(p) }),
        None => Backing::Kernel(KernelVa::for_dma_mr()),
    };
    region_mr(dev, pd, access, mem, iova, length)
}

/// [`new_mr`] for memory already wrapped.
fn region_mr(dev: &IbDev, pd: *mut raw::ib_pd, access: u32, mem: Backing, iova: u64, length: u64) -> *mut raw::ib_mr {
    let entry = MrEntry { key: 0, pd: PdId(pd as usize), access, iova, length, mem, valid: true, windows: 0 };
    publish_mr(dev, entry, KVec::new())
}

/// Publishes `entry` (a region or a window) in the device's MR table under a fresh
/// key, which it returns; from then on the data path can reach it.
fn insert_with_fresh_key(dev: &IbDev, mut entry: MrEntry) -> Result<u32> {
    let data = dev.data();
    let key = data.mr_keys.alloc()?;
    entry.key = key;
    if let Err(e) = data.mrs.insert(&data.mr_keys, entry) {
        data.mr_keys.free(key);
        return Err(e);
    }
    Ok(key)
}

/// Gives `entry` a fresh key, publishes it in the device's MR table and returns its
/// `ib_mr` (keys, iova and length as in the entry; `pages`: see [`MrAlloc`]).
fn publish_mr(dev: &IbDev, entry: MrEntry, pages: KVec<u64>) -> *mut raw::ib_mr {
    let mut ib = raw::ib_mr::default();
    ib.iova = entry.iova;
    ib.length = entry.length;
    let mut b = match KBox::new(MrAlloc { ib, pages }, GFP_KERNEL) {
        Ok(b) => b,
        Err(e) => return err_ptr(e.into()),
    };
    match insert_with_fresh_key(dev, entry) {
        Ok(key) => {
            b.ib.lkey = key;
            b.ib.rkey = key;
            KBox::into_raw(b).cast()
        }
        Err(e) => err_ptr(e),
    }
}

/// `alloc_mr`: a fast-registration MR for a kernel consumer (`IB_MR_TYPE_MEM_REG`,
/// up to [`MAX_FRMR_PAGES`] pages). It starts invalid; `map_mr_sg` builds its page
/// list and a REG_MR work request registers it.
unsafe extern "C" fn alloc_mr_cb(pd: *mut raw::ib_pd, mr_type: raw::ib_mr_type, max_num_sg: u32) -> *mut raw::ib_mr {
    if mr_type != raw::ib_mr_type_IB_MR_TYPE_MEM_REG {
        return err_ptr(super::eopnotsupp());
    }
    if max_num_sg == 0 || max_num_sg > MAX_FRMR_PAGES {
        return err_ptr(EINVAL);
    }
    // SAFETY: ib_core passes a live PD of one of this driver's devices.
    let dev = unsafe { IbDev::from_raw((*pd).device) };
    let (pages, list) = match (KVec::with_capacity(max_num_sg as usize, GFP_KERNEL), PageList::new(max_num_sg, KernelVa::for_dma_mr())) {
        (Ok(p), Ok(l)) => (p, l),
        _ => return err_ptr(ENOMEM),
    };
    let entry = MrEntry { key: 0, pd: PdId(pd as usize), access: 0, iova: 0, length: 0, mem: Backing::Pages(list), valid: false, windows: 0 };
    publish_mr(dev, entry, pages)
}

/// `set_page` callback of `ib_sg_to_pages`: appends one page to the MR's list.
unsafe extern "C" fn set_page_cb(mr: *mut raw::ib_mr, addr: u64) -> c_int {
    // SAFETY: `ib_sg_to_pages` calls this with the MR `map_mr_sg_cb` passed, one of
    // ours, for the duration of that call.
    let b = unsafe { &mut *mr.cast::<MrAlloc>() };
    match b.pages.push_within_capacity(addr) {
        Ok(()) => 0,
        Err(_) => -(raw::ENOMEM as c_int),
    }
}

/// `map_mr_sg`: builds the page list of a fast-registration MR from a DMA-mapped
/// scatterlist (for this device, kernel virtual addresses).
unsafe extern "C" fn map_mr_sg_cb(
    mr: *mut raw::ib_mr,
    sg: *mut raw::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut core::ffi::c_uint,
) -> c_int {
    // SAFETY: ib_core calls this on an MR of this driver, with no concurrent use
    // of the MR (the consumer serialises mapping and posting).
    unsafe { (*mr.cast::<MrAlloc>()).pages.clear() };
    // SAFETY: `mr` and `sg` are valid for the call; `set_page_cb` only touches `mr`.
    unsafe { raw::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(set_page_cb)) }
}

/// Copies the page list `ib_map_mr_sg` built for `mr` into its MR table entry, for a
/// REG_MR being posted.
///
/// # Safety
///
/// `mr` is a live MR of this driver, not being mapped concurrently.
pub(super) unsafe fn stage_fast_reg(dev: &IbDev, mr: *mut raw::ib_mr) -> Result {
    // SAFETY: Per the contract.
    let b = unsafe { &*mr.cast::<MrAlloc>() };
    let data = dev.data();
    let page_size = u64::from(b.ib.page_size);
    data.mrs.stage_pages(&data.mr_keys, b.ib.lkey, &b.pages, page_size, b.ib.iova, b.ib.length)
}

unsafe extern "C" fn reg_user_mr_cb(
    pd: *mut raw::ib_pd,
    start: u64,
    length: u64,
    virt_addr: u64,
    access: c_int,
    dmah: *mut raw::ib_dmah,
    _udata: *mut raw::ib_udata,
) -> *mut raw::ib_mr {
    // SAFETY: ib_core passes a live PD of one of this driver's devices.
    let dev = unsafe { IbDev::from_raw((*pd).device) };
    if !dmah.is_null() {
        return (-(raw::EOPNOTSUPP as isize)) as *mut raw::ib_mr;
    }
    // SAFETY: Pure check against the device's capabilities.
    let ret = unsafe { raw::mrc_check_mr_access(dev.as_raw(), access as u32) };
    if ret != 0 {
        return ret as isize as *mut raw::ib_mr;
    }
    let Ok(len) = usize::try_from(length) else { return err_ptr(EINVAL) };
    if access as u32 & ACCESS_ON_DEMAND != 0 {
        // Spec: MR-9.2.5 — nothing pinned; pages come in as accesses need them.
        // Implicit ODP (the whole address space) is not offered: EINVAL, as rxe.
        if start == 0 && length == u64::MAX {
            return err_ptr(EINVAL);
        }
        // SAFETY: A live device of this driver; the caller's process context.
        return match unsafe { OdpMem::new(dev.as_raw(), start, len, access) } {
            Ok(mem) => region_mr(dev, pd, access as u32, Backing::Odp(mem), virt_addr, length),
            Err(e) => err_ptr(e),
        };
    }
    let mut err: c_int = 0;
    // SAFETY: Pins the caller's pages (this runs in the caller's process context).
    let umem = unsafe { raw::mrc_umem_get(dev.as_raw(), start, len, access, &mut err) };
    if umem.is_null() {
        return err as isize as *mut raw::ib_mr;
    }
    new_mr(dev, pd, access as u32, umem, virt_addr, length)
}

unsafe extern "C" fn get_dma_mr_cb(pd: *mut raw::ib_pd, access: c_int) -> *mut raw::ib_mr {
    // SAFETY: ib_core passes a live PD of one of this driver's devices.
    let dev = unsafe { IbDev::from_raw((*pd).device) };
    // Kernel consumers address memory by kernel virtual address (no DMA device).
    new_mr(dev, pd, access as u32, core::ptr::null_mut(), 0, u64::MAX)
}

unsafe extern "C" fn dereg_mr_cb(mr: *mut raw::ib_mr, _udata: *mut raw::ib_udata) -> c_int {
    // SAFETY: ib_core passes a live MR of this driver; the device outlives it.
    let (dev, lkey) = unsafe { (IbDev::from_raw((*mr).device), (*mr).lkey) };
    let data = dev.data();
    // Out of the table first (no access can reach it after this), then unpinned by
    // the entry's drop, outside the table lock. Refused while memory windows are
    // bound to it: ib_core then keeps the MR.
    match data.mrs.remove(&data.mr_keys, lkey) {
        Ok(entry) => drop(entry),
        Err(e) => return e.to_errno(),
    }
    data.mr_keys.free(lkey);
    // SAFETY: `mr` was returned by `new_mr` (KBox::into_raw) and ib_core deregisters it
    // once, successfully now; we take ownership back.
    drop(unsafe { KBox::from_raw(mr.cast::<MrAlloc>()) });
    0
}

/// `advise_mr` (`ibv_advise_mr`): brings the pages of on-demand regions in ahead of
/// use (spec MR-9.2.5), writable for `PREFETCH_WRITE`, or enters only those the
/// process has (`PREFETCH_NO_FAULT`). Each SGE names a region of the PD by L_Key
/// (`EINVAL` otherwise; `EPERM` for `PREFETCH_WRITE` to a region that may not be
/// written). Pinned regions are resident already: nothing to do. Asynchronous
/// advice (no `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`) is carried out at once as well,
/// its paging failures ignored (verbs: best effort).
unsafe extern "C" fn advise_mr_cb(
    pd: *mut raw::ib_pd,
    advice: raw::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut raw::ib_sge,
    num_sge: u32,
    _attrs: *mut raw::uverbs_attr_bundle,
) -> c_int {
    let (write, fault) = match advice {
        raw::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => (false, true),
        raw::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => (true, true),
        raw::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => (false, false),
        _ => return super::eopnotsupp().to_errno(),
    };
    let sync = flags & raw::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0;
    if sg_list.is_null() && num_sge > 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core passes a live PD of this driver and `num_sge` SGEs it copied
    // from the process (or none).
    let (dev, sges) = unsafe {
        let n = num_sge as usize;
        (IbDev::from_raw((*pd).device), if n == 0 { &[][..] } else { core::slice::from_raw_parts(sg_list, n) })
    };
    let data = dev.data();
    // A local access by the PD: no QP, so no type 2 window (never local anyway).
    let by = Accessor { pd: PdId(pd as usize), qp: QpId::NONE };
    for sge in sges {
        let len = u64::from(sge.length);
        // A key that names no region the PD may use fails either way.
        let r = match data.mrs.on_demand(&data.mr_keys, sge.lkey, by, sge.addr, len, write) {
            Ok(Some((mem, offset))) => mem.fault_in(offset, len, write, fault),
            Ok(None) => Ok(()),
            Err(e) => return e.to_errno(),
        };
        if let (Err(e), true) = (r, sync) {
            return e.to_errno();
        }
    }
    0
}

/// `alloc_mw`: a memory window of type 1 or 2 (ib_core checks the type), unbound,
/// under a fresh key from the space of region keys (spec MR-9.2.4).
unsafe extern "C" fn alloc_mw_cb(mw: *mut raw::ib_mw, udata: *mut raw::ib_udata) -> c_int {
    // SAFETY: ib_core passes NULL or a valid udata for the call.
    if unsafe { super::ibdev::has_driver_data(udata) } {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core allocated `mw` (`size_ib_mw`) and set its device, PD and type.
    let (dev, pd, ty) = unsafe { (IbDev::from_raw((*mw).device), (*mw).pd, (*mw).type_) };
    match insert_with_fresh_key(dev, Window::entry(PdId(pd as usize), ty == raw::ib_mw_type_IB_MW_TYPE_2)) {
        Ok(key) => {
            // SAFETY: As above; ib_core reports the key to the process.
            unsafe { (*mw).rkey = key };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `dealloc_mw`: unbinds the window and frees its key; ib_core frees `mw`.
unsafe extern "C" fn dealloc_mw_cb(mw: *mut raw::ib_mw) -> c_int {
    // SAFETY: A live window of this driver; the device outlives it. Its `rkey` is
    // the one `alloc_mw` gave (the process's copy changes with binds, this one
    // does not); the window is found by the key's slot.
    let (dev, key) = unsafe { (IbDev::from_raw((*mw).device), (*mw).rkey) };
    let data = dev.data();
    drop(data.mrs.remove_window(&data.mr_keys, key));
    data.mr_keys.free(key);
    0
}

/// The driver's QP inside an ib_core QP.
///
/// # Safety
///
/// `ib` must be a QP of this driver whose `create_qp` succeeded and whose
/// `destroy_qp` has not run, alive for `'a`.
unsafe fn qp<'a>(ib: *mut raw::ib_qp) -> &'a Qp {
    // SAFETY: Per the contract `ib` heads a live `QpAlloc` with an initialised `qp`.
    unsafe { &(*ib.cast::<QpAlloc>()).qp }
}

/// The driver's QP, for the data path.
///
/// # Safety
///
/// As for `qp`.
pub(super) unsafe fn qp_of<'a>(ib: *mut raw::ib_qp) -> &'a Qp {
    // SAFETY: Same contract.
    unsafe { qp(ib) }
}

/// The work context of a QP.
///
/// # Safety
///
/// As for `qp`.
pub(super) unsafe fn qp_alloc_io(ib: *mut raw::ib_qp) -> *mut raw::mrc_qp_io {
    // SAFETY: Per the contract `ib` heads a live `QpAlloc`; `io` is set in create.
    unsafe { (*ib.cast::<QpAlloc>()).io }
}

/// The driver's CQ, for the data path.
///
/// # Safety
///
/// As for `cq`.
pub(super) unsafe fn cq_of<'a>(ib: *mut raw::ib_cq) -> &'a Cq {
    // SAFETY: Same contract.
    unsafe { cq(ib) }
}

/// The driver's SRQ, for the data path.
///
/// # Safety
///
/// As for `srq`.
pub(super) unsafe fn srq_of<'a>(ib: *mut raw::ib_srq) -> &'a Srq {
    // SAFETY: Same contract.
    unsafe { srq(ib) }
}

/// The destination GID of an address handle.
///
/// # Safety
///
/// `ah` must be a live AH of this driver.
pub(super) unsafe fn ah_dgid(ah: *mut raw::ib_ah) -> [u8; 16] {
    // SAFETY: Per the contract `ah` heads a live `AhAlloc`.
    unsafe { (*ah.cast::<AhAlloc>()).dgid }
}

/// The device a QP belongs to.
///
/// # Safety
///
/// `ib` must be a live QP of this driver.
unsafe fn qp_dev<'a>(ib: *mut raw::ib_qp) -> &'a IbDev {
    // SAFETY: ib_core sets `device` before calling create_qp and the device outlives
    // its QPs; all QPs of this driver's ops belong to this driver's devices.
    unsafe { IbDev::from_raw((*ib).device) }
}

/// QP number of the GSI QP (IBTA: QP1).
const GSI_QPN: u32 = 1;

const NEG_EOPNOTSUPP: c_int = -(raw::EOPNOTSUPP as c_int);


unsafe extern "C" fn create_qp_cb(
    ib: *mut raw::ib_qp,
    init: *mut raw::ib_qp_init_attr,
    udata: *mut raw::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a valid init attribute struct for the call.
    let init = unsafe { &mut *init };
    // The GSI QP (QP1, which ib_mad opens for the connection manager) is a UD QP
    // with the fixed number 1. XRC, raw packet: not offered.
    let (ty, gsi) = match init.qp_type {
        raw::ib_qp_type_IB_QPT_RC => (QpType::Rc, false),
        raw::ib_qp_type_IB_QPT_UC => (QpType::Uc, false),
        raw::ib_qp_type_IB_QPT_UD => (QpType::Ud, false),
        raw::ib_qp_type_IB_QPT_GSI => (QpType::Ud, true),
        _ => return NEG_EOPNOTSUPP,
    };
    if init.create_flags != 0 {
        return NEG_EOPNOTSUPP;
    }
    let requested = QpCaps {
        max_send_wr: init.cap.max_send_wr,
        max_recv_wr: init.cap.max_recv_wr,
        max_send_sge: init.cap.max_send_sge,
        max_recv_sge: init.cap.max_recv_sge,
        max_inline_data: init.cap.max_inline_data,
    };
    let caps = match requested.validate(!init.srq.is_null()) {
        Ok(c) => c,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: `ib` is being created on one of this driver's devices.
    let dev = unsafe { qp_dev(ib) };
    // QPN slot 1 is reserved in the table, so no other QP's number ends in it.
    let qpn = if gsi {
        GSI_QPN
    } else {
        match dev.data().qpns.alloc() {
            Ok(n) => n,
            Err(e) => return e.to_errno(),
        }
    };
    let free_qpn = |qpn: u32| {
        if qpn != GSI_QPN {
            dev.data().qpns.free(qpn);
        }
    };
    let engine = (|| -> Result<Engine> {
        let conn = match ty {
            QpType::Rc | QpType::Uc => {
                let mut c = super::new_zeroed::<crate::proto::Connection>()?;
                // A placeholder configuration until the QP is connected (RTR).
                c.reset(crate::proto::Config::new(qpn, 0, 0, 0));
                Some(c)
            }
            QpType::Ud => None,
        };
        let sig_all = init.sq_sig_type == raw::ib_sig_type_IB_SIGNAL_ALL_WR;
        // SAFETY: ib_core set `pd` before calling create_qp.
        let pd = PdId(unsafe { (*ib).pd } as usize);
        // SAFETY: ib_core passes NULL or a live SRQ of this driver, which outlives the
        // QP (ib_core holds a reference while the QP exists).
        let srq_sge = (!init.srq.is_null()).then(|| unsafe { srq(init.srq) }.max_sge());
        // The staging buffer holds the largest packet this device's netdev carries
        // now; a connection's MTU is cut to it later (`Engine::config_for`), so an
        // `rc_mtu` larger than the link costs no memory per QP.
        let netdev_mtu = dev.with_netdev(|n| n.mtu()).unwrap_or(0);
        let max_rc_mtu = crate::device::rc_mtu_for(*crate::module_parameters::rc_mtu.value(), netdev_mtu);
        let mut e =
            Engine::new(ty, qpn, pd, &caps, sig_all, super::random_u32() as u16, srq_sge, conn, max_rc_mtu)?;
        // A process's QP posts through rings mapped into it, if its provider asks (a
        // UD send entry carries its address handle's destination).
        if !gsi {
            // SAFETY: ib_core passes NULL or the udata of this create command.
            let user = unsafe { super::UserQueues::new(udata, &caps, srq_sge.is_some(), ty == QpType::Ud)? };
            if let Some(u) = user {
                // SAFETY: As above.
                unsafe { u.respond(udata)? };
                e.attach_user_queues(u);
            }
        }
        Ok(e)
    })();
    let engine = match engine {
        Ok(e) => e,
        Err(e) => {
            free_qpn(qpn);
            return e.to_errno();
        }
    };
    // SAFETY: `ib` is valid; ib_core reports `qp_num` to the consumer (and the data
    // path looks QPs up by it).
    unsafe { (*ib).qp_num = qpn };
    // SAFETY: `ib` heads a zeroed allocation of `size_ib_qp` = size_of::<QpAlloc>()
    // bytes, unused by anyone else until we return; the slot is initialised once here
    // and dropped in `destroy_qp` (or below on failure).
    let slot = unsafe { &raw mut (*ib.cast::<QpAlloc>()).qp };
    // SAFETY: As above; ib_core never moves the object. `Qp::new` is infallible.
    let Ok(()) = unsafe { Qp::new(qpn, ty, caps, engine).__pinned_init(slot) };
    // SAFETY: The QP is fully initialised; its work may run from now on.
    match unsafe { qp_start(ib) } {
        // SAFETY: Still exclusively ours until we return.
        Ok(io) => unsafe { (*ib.cast::<QpAlloc>()).io = io },
        Err(e) => {
            // SAFETY: Initialised above, never published; dropped once.
            unsafe { core::ptr::drop_in_place(slot) };
            free_qpn(qpn);
            return e.to_errno();
        }
    }
    init.cap.max_send_wr = caps.max_send_wr;
    init.cap.max_recv_wr = caps.max_recv_wr;
    init.cap.max_send_sge = caps.max_send_sge;
    init.cap.max_recv_sge = caps.max_recv_sge;
    init.cap.max_inline_data = caps.max_inline_data;
    0
}

unsafe extern "C" fn modify_qp_cb(
    ib: *mut raw::ib_qp,
    attr: *mut raw::ib_qp_attr,
    mask: c_int,
    udata: *mut raw::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes NULL or a valid udata for the call.
    if unsafe { super::ibdev::has_driver_data(udata) } {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core passes a valid attribute struct and a live QP of this driver.
    let (a, qp) = unsafe { (&*attr, qp(ib)) };
    let mask = mask as u32;
    let has = |bit: u32| mask & bit != 0;
    let cur = if has(raw::ib_qp_attr_mask_IB_QP_CUR_STATE) { a.cur_qp_state } else { qp.state() as u32 };
    let next = if has(raw::ib_qp_attr_mask_IB_QP_STATE) { a.qp_state } else { cur };
    // SAFETY: ib_core's pure rule table; `ib` is live.
    let legal = unsafe { raw::ib_modify_qp_is_ok(cur, next, (*ib).qp_type, mask) };
    if !legal {
        return EINVAL.to_errno();
    }
    let opt = |bit: u32| has(bit);
    let u = QpUpdate {
        state: if opt(raw::ib_qp_attr_mask_IB_QP_STATE) { QpState::from_raw(a.qp_state) } else { None },
        access_flags: opt(raw::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS).then_some(a.qp_access_flags as u32),
        port: opt(raw::ib_qp_attr_mask_IB_QP_PORT).then_some(a.port_num),
        qkey: opt(raw::ib_qp_attr_mask_IB_QP_QKEY).then_some(a.qkey),
        // SAFETY: `dgid` is a plain 16-byte union; reading its bytes is always valid.
        remote_gid: opt(raw::ib_qp_attr_mask_IB_QP_AV).then(|| unsafe { a.ah_attr.grh.dgid.raw }),
        path_mtu: opt(raw::ib_qp_attr_mask_IB_QP_PATH_MTU).then_some(a.path_mtu),
        timeout: opt(raw::ib_qp_attr_mask_IB_QP_TIMEOUT).then_some(a.timeout),
        retry_cnt: opt(raw::ib_qp_attr_mask_IB_QP_RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: opt(raw::ib_qp_attr_mask_IB_QP_RNR_RETRY).then_some(a.rnr_retry),
        rq_psn: opt(raw::ib_qp_attr_mask_IB_QP_RQ_PSN).then_some(a.rq_psn),
        sq_psn: opt(raw::ib_qp_attr_mask_IB_QP_SQ_PSN).then_some(a.sq_psn),
        max_rd_atomic: opt(raw::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        max_dest_rd_atomic: opt(raw::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: opt(raw::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        dest_qpn: opt(raw::ib_qp_attr_mask_IB_QP_DEST_QPN).then_some(a.dest_qp_num),
    };
    // SAFETY: A live QP's device.
    let dev = unsafe { IbDev::from_raw((*ib).device) };
    let netdev_mtu = dev.with_netdev(|n| n.mtu()).unwrap_or(0);
    let tuning = crate::qp::Tuning {
        num_paths: *crate::module_parameters::num_paths.value() as u8,
        rc_mtu: crate::device::rc_mtu_for(*crate::module_parameters::rc_mtu.value(), netdev_mtu),
        conn: crate::conn_tuning(),
    };
    let ret = match qp.modify(&u, &tuning) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    };
    // Let the work act on the new state (flush on ERR, start sending on RTS).
    // SAFETY: A live QP of this driver.
    unsafe { super::datapath::qp_kick(ib) };
    ret
}

unsafe extern "C" fn query_qp_cb(
    ib: *mut raw::ib_qp,
    attr: *mut raw::ib_qp_attr,
    _mask: c_int,
    init: *mut raw::ib_qp_init_attr,
) -> c_int {
    // SAFETY: ib_core passes caller-owned output structs and a live QP of this driver.
    let (a, init, qp) = unsafe { (&mut *attr, &mut *init, qp(ib)) };
    let s = qp.attrs();
    a.qp_state = s.state as u32;
    a.cur_qp_state = s.state as u32;
    a.path_mtu = s.path_mtu;
    a.qkey = s.qkey;
    a.rq_psn = s.rq_psn;
    a.sq_psn = s.sq_psn;
    a.dest_qp_num = s.dest_qpn;
    a.qp_access_flags = s.access_flags as c_int;
    a.port_num = s.port;
    a.timeout = s.timeout;
    a.retry_cnt = s.retry_cnt;
    a.rnr_retry = s.rnr_retry;
    a.min_rnr_timer = s.min_rnr_timer;
    a.max_rd_atomic = s.max_rd_atomic;
    a.max_dest_rd_atomic = s.max_dest_rd_atomic;
    a.ah_attr.grh.dgid.raw = s.remote_gid;
    let c = qp.caps;
    for cap in [&mut a.cap, &mut init.cap] {
        cap.max_send_wr = c.max_send_wr;
        cap.max_recv_wr = c.max_recv_wr;
        cap.max_send_sge = c.max_send_sge;
        cap.max_recv_sge = c.max_recv_sge;
        cap.max_inline_data = c.max_inline_data;
    }
    0
}

unsafe extern "C" fn fill_res_qp_entry_cb(msg: *mut raw::sk_buff, ib: *mut raw::ib_qp) -> c_int {
    // SAFETY: ib_core's resource tracking calls this on live QPs of this driver.
    let qp = unsafe { qp(ib) };
    // SAFETY: `msg` is the netlink message being built.
    let table = unsafe { raw::mrc_nl_driver_table_start(msg) };
    if table.is_null() {
        return -(raw::EMSGSIZE as c_int);
    }
    let mut ret = 0;
    qp.engine.lock().describe(|name, v| {
        if ret == 0 {
            // SAFETY: `msg` is the message being built; `name` is static.
            ret = unsafe { raw::rdma_nl_put_driver_u64(msg, name.as_ptr(), v) };
        }
    });
    // SAFETY: Closes (or on error, removes) the table opened above.
    unsafe { raw::mrc_nl_driver_table_end(msg, table, ret == 0) };
    ret
}

unsafe extern "C" fn destroy_qp_cb(ib: *mut raw::ib_qp, _udata: *mut raw::ib_udata) -> c_int {
    // SAFETY: ib_core calls destroy once, after a successful create, with no other op
    // running on the QP.
    let (dev, qpn) = unsafe { (qp_dev(ib), qp(ib).qpn) };
    // SAFETY: As above; ib_core destroys QPs in process context.
    unsafe { super::datapath::qp_close(ib) };
    // SAFETY: Set up in create; after this no datagram or work touches the QP.
    unsafe { qp_stop(ib, qp_alloc_io(ib)) };
    // Completions still queued would name a freed QP.
    // SAFETY: ib_core keeps the QP's CQs alive while the QP exists.
    unsafe {
        for cq in [(*ib).send_cq, (*ib).recv_cq] {
            if !cq.is_null() {
                cq_of(cq).purge_qp(qpn);
            }
        }
    }
    if qpn != GSI_QPN {
        dev.data().qpns.free(qpn);
    }
    // SAFETY: As above; the data is never used again.
    unsafe { core::ptr::drop_in_place(&raw mut (*ib.cast::<QpAlloc>()).qp) };
    0
}

/// The driver's CQ inside an ib_core CQ.
///
/// # Safety
///
/// `ib` must be a CQ of this driver whose `create_cq` succeeded and whose
/// `destroy_cq` has not run, alive for `'a`.
unsafe fn cq<'a>(ib: *mut raw::ib_cq) -> &'a Cq {
    // SAFETY: Per the contract `ib` heads a live `CqAlloc` with an initialised `cq`.
    unsafe { &(*ib.cast::<CqAlloc>()).cq }
}

/// Runs `op` (attach or detach) on the device's multicast groups with the GID and
/// the QP's number, for a UD QP (`EINVAL` for others: only datagrams go to groups).
///
/// # Safety
///
/// `ib` is a live QP of this driver and `gid` a valid GID, for the call.
unsafe fn mcast_op(
    ib: *mut raw::ib_qp,
    gid: *mut raw::ib_gid,
    op: impl FnOnce(&crate::mcast::Groups, [u8; 16], u32) -> Result,
) -> c_int {
    // SAFETY: Per the contract.
    let (ty, qpn, raw_gid) = unsafe { ((*ib).qp_type, (*ib).qp_num, (*gid).raw) };
    if ty != raw::ib_qp_type_IB_QPT_UD {
        return EINVAL.to_errno();
    }
    // SAFETY: A QP's device outlives it.
    let dev = unsafe { IbDev::from_raw((*ib).device) };
    op(&dev.data().mcast, raw_gid, qpn).map_or_else(|e| e.to_errno(), |()| 0)
}

/// `ibv_attach_mcast`: the QP gets a copy of every datagram to the group (spec
/// MR-3.6.3). ib_core keeps the QP from being destroyed while attached.
unsafe extern "C" fn attach_mcast_cb(ib: *mut raw::ib_qp, gid: *mut raw::ib_gid, _lid: u16) -> c_int {
    // SAFETY: ib_core passes a live QP of this driver and a valid GID.
    unsafe { mcast_op(ib, gid, |g, gid, qpn| g.attach(gid, qpn)) }
}

unsafe extern "C" fn detach_mcast_cb(ib: *mut raw::ib_qp, gid: *mut raw::ib_gid, _lid: u16) -> c_int {
    // SAFETY: ib_core passes a live QP of this driver and a valid GID.
    unsafe { mcast_op(ib, gid, |g, gid, qpn| g.detach(gid, qpn)) }
}

unsafe extern "C" fn alloc_ucontext_cb(_uctx: *mut raw::ib_ucontext, _udata: *mut raw::ib_udata) -> c_int {
    // Version 1 of the user ABI has no driver-private context data.
    0
}

unsafe extern "C" fn dealloc_ucontext_cb(_uctx: *mut raw::ib_ucontext) {}

/// Offering this lets ib_core unregister a device (`rdma link del`, netdev removal,
/// rmmod) while processes still hold it open: ib_core destroys their objects through
/// the usual destroy ops and reports a fatal device event, instead of waiting for
/// every process to exit. The rings mapped into processes are ib_core's rdma mmap
/// entries, which ib_core itself zaps, so there is nothing more to do here.
unsafe extern "C" fn disassociate_ucontext_cb(_uctx: *mut raw::ib_ucontext) {}

unsafe extern "C" fn alloc_pd_cb(_pd: *mut raw::ib_pd, _udata: *mut raw::ib_udata) -> c_int {
    // A PD is only an identity that MRs, QPs and AHs are checked against; ib_core's
    // `struct ib_pd` is all it needs.
    0
}

unsafe extern "C" fn dealloc_pd_cb(_pd: *mut raw::ib_pd, _udata: *mut raw::ib_udata) -> c_int {
    0
}

unsafe extern "C" fn create_cq_cb(
    ib: *mut raw::ib_cq,
    attr: *const raw::ib_cq_init_attr,
    attrs: *mut raw::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: ib_core passes a valid attribute struct for the call.
    let attr = unsafe { &*attr };
    if attr.flags != 0 {
        return -(raw::EOPNOTSUPP as c_int);
    }
    // SAFETY: `attrs` is NULL (kernel consumer) or the bundle of this command.
    let udata = unsafe { raw::mrc_attrs_udata(attrs) };
    let init = Cq::check_size(attr.cqe)
        // SAFETY: `udata` is NULL or this command's driver udata.
        .and_then(|()| unsafe { super::UserCq::new(udata, attr.cqe) })
        .and_then(|user| {
            if let Some(u) = user.as_ref() {
                // SAFETY: As above.
                unsafe { u.respond(udata)? };
            }
            Cq::new(attr.cqe, user)
        });
    let init = match init {
        Ok(init) => init,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: `ib` heads a zeroed allocation of `size_ib_cq` = size_of::<CqAlloc>()
    // bytes that nothing else uses until we return; the `cq` slot is initialised once
    // here and dropped in `destroy_cq` (not called if we fail).
    let slot = unsafe { &raw mut (*ib.cast::<CqAlloc>()).cq };
    // SAFETY: See above; the slot is pinned (ib_core never moves the object).
    if let Err(e) = unsafe { init.__pinned_init(slot) } {
        return e.to_errno();
    }
    // SAFETY: Just initialised.
    let cap = unsafe { cq(ib) }.capacity();
    // SAFETY: `ib` is valid; ib_core reads `cqe` back to report the real size.
    unsafe { (*ib).cqe = cap as c_int };
    0
}

unsafe extern "C" fn destroy_cq_cb(ib: *mut raw::ib_cq, _udata: *mut raw::ib_udata) -> c_int {
    // SAFETY: ib_core calls destroy once, after a successful create, with no other op
    // running on the CQ; the data is never used again.
    unsafe { core::ptr::drop_in_place(&raw mut (*ib.cast::<CqAlloc>()).cq) };
    0
}

/// `ibv_resize_cq` (ib_core offers resizing to processes only). A CQ with a mapped
/// ring gets a new ring holding the completions not yet polled (the response says
/// where it is; the provider maps it once the command succeeded); one without keeps
/// its completions in new kernel storage.
unsafe extern "C" fn resize_user_cq_cb(ib: *mut raw::ib_cq, cqe: core::ffi::c_uint, udata: *mut raw::ib_udata) -> c_int {
    // SAFETY: ib_core calls this on a live CQ of this driver, holding a reference.
    let cq = unsafe { cq(ib) };
    let resized = Cq::check_size(cqe)
        .and_then(|()| {
            if cq.is_mapped() {
                // SAFETY: `udata` is this resize command's driver udata.
                let ring = unsafe { super::UserCq::for_resize(udata, cqe)? };
                // SAFETY: As above. Told before the swap: a failed resize leaves
                // the process on its old ring, whatever the response said.
                unsafe { ring.respond_resize(udata)? };
                Ok(CqStorage::User(ring))
            } else {
                CqStorage::kernel(cqe)
            }
        })
        .and_then(|mut storage| {
            let r = cq.resize(cqe, &mut storage);
            // Freed here, outside the CQ's lock: removing a ring's mapping may sleep.
            drop(storage);
            r
        });
    match resized {
        Ok(()) => {
            // SAFETY: `ib` is valid; ib_core reports `cqe` back to the process.
            unsafe { (*ib).cqe = cqe as c_int };
            0
        }
        Err(e) => e.to_errno(),
    }
}

unsafe extern "C" fn poll_cq_cb(ib: *mut raw::ib_cq, num: c_int, wc: *mut raw::ib_wc) -> c_int {
    let max = usize::try_from(num).unwrap_or(0);
    // SAFETY: ib_core calls poll only on live CQs of this driver.
    let cq = unsafe { cq(ib) };
    // SAFETY: As above; a CQ's device outlives it; `uobject` marks a process's CQ.
    unsafe {
        if !(*ib).uobject.is_null() {
            IbDev::from_raw((*ib).device).data().counters.add(crate::net::Counter::CmdPolls, 1);
        }
    }
    let n = cq.poll(max, |i, w| {
        // SAFETY: `wc` has room for `num` entries and `i < num`.
        let out = unsafe { &mut *wc.add(i) };
        out.__bindgen_anon_1.wr_id = w.wr_id;
        out.status = w.status.ib_wc_status();
        out.opcode = wc_opcode_raw(w.opcode);
        out.vendor_err = 0;
        out.byte_len = w.byte_len;
        // Destroying a QP purges its completions first, so the handle is live.
        out.qp = w.qp_handle as *mut raw::ib_qp;
        out.src_qp = w.src_qp;
        // The same flags a mapped completion ring carries (`uring::wc_flags`).
        let (flags, net) = super::uring::wc_flags(w);
        out.wc_flags = flags as c_int;
        if let Some(t) = net {
            out.network_hdr_type = t;
        }
        if let Some(imm) = w.imm {
            out.ex.imm_data = imm.to_be();
        } else if let Some(rkey) = w.invalidated_rkey {
            out.ex.invalidate_rkey = rkey;
        }
        out.pkey_index = 0;
        out.port_num = 1;
    });
    n as c_int
}

unsafe extern "C" fn req_notify_cq_cb(ib: *mut raw::ib_cq, flags: raw::ib_cq_notify_flags) -> c_int {
    let arm = if flags & raw::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
        == raw::ib_cq_notify_flags_IB_CQ_SOLICITED
    {
        Arm::Solicited
    } else {
        Arm::Next
    };
    // SAFETY: ib_core calls this only on live CQs of this driver.
    let pending = unsafe { cq(ib) }.arm(arm);
    let report = flags & raw::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
    c_int::from(report && pending)
}

#[kunit_tests(rdma_metaroce_ffi_abi)]
mod tests {
    use super::*;

    /// The driver's completion codes are the kernel's `ib_wc_status`/`ib_wc_opcode`.
    #[test]
    fn completion_codes_match_the_kernel_abi() {
        let statuses = [
            (WcStatus::Success, raw::ib_wc_status_IB_WC_SUCCESS),
            (WcStatus::LocQpOpErr, raw::ib_wc_status_IB_WC_LOC_QP_OP_ERR),
            (WcStatus::LocLenErr, raw::ib_wc_status_IB_WC_LOC_LEN_ERR),
            (WcStatus::LocProtErr, raw::ib_wc_status_IB_WC_LOC_PROT_ERR),
            (WcStatus::WrFlushErr, raw::ib_wc_status_IB_WC_WR_FLUSH_ERR),
            (WcStatus::MwBindErr, raw::ib_wc_status_IB_WC_MW_BIND_ERR),
            (WcStatus::RemInvReqErr, raw::ib_wc_status_IB_WC_REM_INV_REQ_ERR),
            (WcStatus::RemAccessErr, raw::ib_wc_status_IB_WC_REM_ACCESS_ERR),
            (WcStatus::RemOpErr, raw::ib_wc_status_IB_WC_REM_OP_ERR),
            (WcStatus::RetryExcErr, raw::ib_wc_status_IB_WC_RETRY_EXC_ERR),
            (WcStatus::RnrRetryExcErr, raw::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR),
        ];
        for (ours, kernel) in statuses {
            assert_eq!(ours.ib_wc_status(), kernel);
        }
        let opcodes = [
            (WcOpcode::Send, raw::ib_wc_opcode_IB_WC_SEND),
            (WcOpcode::RdmaWrite, raw::ib_wc_opcode_IB_WC_RDMA_WRITE),
            (WcOpcode::RdmaRead, raw::ib_wc_opcode_IB_WC_RDMA_READ),
            (WcOpcode::CompSwap, raw::ib_wc_opcode_IB_WC_COMP_SWAP),
            (WcOpcode::FetchAdd, raw::ib_wc_opcode_IB_WC_FETCH_ADD),
            (WcOpcode::Recv, raw::ib_wc_opcode_IB_WC_RECV),
            (WcOpcode::RecvRdmaWithImm, raw::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM),
            (WcOpcode::LocalInv, raw::ib_wc_opcode_IB_WC_LOCAL_INV),
            (WcOpcode::RegMr, raw::ib_wc_opcode_IB_WC_REG_MR),
            (WcOpcode::BindMw, raw::ib_wc_opcode_IB_WC_BIND_MW),
        ];
        for (ours, kernel) in opcodes {
            assert_eq!(wc_opcode_raw(ours), kernel);
        }
    }
}
