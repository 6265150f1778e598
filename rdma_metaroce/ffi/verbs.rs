// SPDX-License-Identifier: GPL-2.0

//! Verbs objects whose memory ib_core allocates for the driver — user contexts,
//! protection domains and completion queues: their layouts (ib_core's struct first,
//! then the driver's data), the object sizes ib_core needs, and the op trampolines.

use super::raw;
use crate::cq::{Arm, Cq, WcOpcode, WcStatus};
use core::ffi::c_int;
use kernel::prelude::*;

/// A completion queue allocation: `struct ib_cq` first (ib_core requires it at
/// offset 0), then the driver's [`Cq`].
#[repr(C)]
struct CqAlloc {
    ib: raw::ib_cq,
    cq: Cq,
}

const _: () = assert!(core::mem::offset_of!(CqAlloc, ib) == 0);

/// Adds the verbs-object ops and object sizes to the device's ops table.
pub(super) const fn install(mut ops: raw::ib_device_ops) -> raw::ib_device_ops {
    ops.size_ib_ucontext = core::mem::size_of::<raw::ib_ucontext>();
    ops.alloc_ucontext = Some(alloc_ucontext_cb);
    ops.dealloc_ucontext = Some(dealloc_ucontext_cb);
    ops.size_ib_pd = core::mem::size_of::<raw::ib_pd>();
    ops.alloc_pd = Some(alloc_pd_cb);
    ops.dealloc_pd = Some(dealloc_pd_cb);
    ops.size_ib_cq = core::mem::size_of::<CqAlloc>();
    ops.create_cq = Some(create_cq_cb);
    ops.destroy_cq = Some(destroy_cq_cb);
    ops.poll_cq = Some(poll_cq_cb);
    ops.req_notify_cq = Some(req_notify_cq_cb);
    ops
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

unsafe extern "C" fn alloc_ucontext_cb(_uctx: *mut raw::ib_ucontext, _udata: *mut raw::ib_udata) -> c_int {
    // Version 1 of the user ABI has no driver-private context data.
    0
}

unsafe extern "C" fn dealloc_ucontext_cb(_uctx: *mut raw::ib_ucontext) {}

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
    _attrs: *mut raw::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: ib_core passes a valid attribute struct for the call.
    let attr = unsafe { &*attr };
    if attr.flags != 0 {
        return -(raw::EOPNOTSUPP as c_int);
    }
    let init = match Cq::new(attr.cqe) {
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

unsafe extern "C" fn poll_cq_cb(ib: *mut raw::ib_cq, num: c_int, wc: *mut raw::ib_wc) -> c_int {
    let max = usize::try_from(num).unwrap_or(0);
    // SAFETY: ib_core calls poll only on live CQs of this driver.
    let cq = unsafe { cq(ib) };
    let n = cq.poll(max, |i, w| {
        // SAFETY: `wc` has room for `num` entries and `i < num`.
        let out = unsafe { &mut *wc.add(i) };
        out.__bindgen_anon_1.wr_id = w.wr_id;
        out.status = w.status as u32;
        out.opcode = w.opcode as u32;
        out.vendor_err = 0;
        out.byte_len = w.byte_len;
        out.qp = core::ptr::null_mut();
        out.src_qp = w.src_qp;
        out.wc_flags = 0;
        if let Some(imm) = w.imm {
            out.ex.imm_data = imm.to_be();
            out.wc_flags |= raw::ib_wc_flags_IB_WC_WITH_IMM as c_int;
        } else if let Some(rkey) = w.invalidated_rkey {
            out.ex.invalidate_rkey = rkey;
            out.wc_flags |= raw::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int;
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
            (WcStatus::LocalLengthError, raw::ib_wc_status_IB_WC_LOC_LEN_ERR),
            (WcStatus::LocalProtectionError, raw::ib_wc_status_IB_WC_LOC_PROT_ERR),
            (WcStatus::WrFlushError, raw::ib_wc_status_IB_WC_WR_FLUSH_ERR),
            (WcStatus::RemoteInvalidRequest, raw::ib_wc_status_IB_WC_REM_INV_REQ_ERR),
            (WcStatus::RemoteAccessError, raw::ib_wc_status_IB_WC_REM_ACCESS_ERR),
            (WcStatus::RemoteOperationError, raw::ib_wc_status_IB_WC_REM_OP_ERR),
            (WcStatus::RetryExceeded, raw::ib_wc_status_IB_WC_RETRY_EXC_ERR),
            (WcStatus::RnrRetryExceeded, raw::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR),
        ];
        for (ours, kernel) in statuses {
            assert_eq!(ours as u32, kernel);
        }
        let opcodes = [
            (WcOpcode::Send, raw::ib_wc_opcode_IB_WC_SEND),
            (WcOpcode::RdmaWrite, raw::ib_wc_opcode_IB_WC_RDMA_WRITE),
            (WcOpcode::RdmaRead, raw::ib_wc_opcode_IB_WC_RDMA_READ),
            (WcOpcode::CompSwap, raw::ib_wc_opcode_IB_WC_COMP_SWAP),
            (WcOpcode::FetchAdd, raw::ib_wc_opcode_IB_WC_FETCH_ADD),
            (WcOpcode::Recv, raw::ib_wc_opcode_IB_WC_RECV),
            (WcOpcode::RecvRdmaWithImm, raw::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM),
        ];
        for (ours, kernel) in opcodes {
            assert_eq!(ours as u32, kernel);
        }
    }
}
