// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a bounded ring of work completions, arming for completion
//! events (`req_notify_cq`), and overflow detection. Safe code; the FFI layer turns
//! entries into `struct ib_wc` and calls the consumer's completion handler.

use crate::ffi::UserCq;
use kernel::prelude::*;

/// Largest CQ a consumer may create (`max_cqe` in `query_device`).
pub(crate) const MAX_CQE: u32 = (1 << 16) - 1;

pub(crate) use crate::proto::{WcOpcode, WcStatus};

/// The `enum ib_wc_opcode` value of a completion opcode.
pub(crate) const fn wc_opcode_raw(op: WcOpcode) -> u32 {
    match op {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::Recv => 128,
        WcOpcode::RecvRdmaWithImm => 129,
        WcOpcode::LocalInv => 6,
        WcOpcode::RegMr => 10,
    }
}

/// How the receive side of a UD QP got its message: the 40 bytes in front of the
/// payload hold a GRH (for IPv4, the IP header in its last 20 bytes; for IPv6, the
/// IPv6 header).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Grh {
    None,
    Ipv4,
    /// The IPv6 header fills the 40 bytes.
    Ipv6,
}

/// One work completion.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wc {
    /// The QP the work request was posted to (resolved to its `ib_qp` at poll time).
    pub(crate) qpn: u32,
    /// The QP's `struct ib_qp`, as an opaque handle the FFI layer reports back
    /// (valid while a completion of the QP is queued: destroy purges them first).
    pub(crate) qp_handle: usize,
    pub(crate) wr_id: u64,
    pub(crate) status: WcStatus,
    pub(crate) opcode: WcOpcode,
    pub(crate) byte_len: u32,
    pub(crate) src_qp: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) invalidated_rkey: Option<u32>,
    pub(crate) grh: Grh,
}

/// What the consumer asked to be notified of (`ib_cq_notify_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Arm {
    /// Not armed.
    None,
    /// Next completion of any kind.
    Next,
    /// Next solicited (or error) completion.
    Solicited,
}

/// Outcome of adding a completion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Pushed {
    /// Stored; `notify` says whether the consumer's handler must be called.
    Stored { notify: bool },
    /// The ring was full: the completion is lost and the CQ is in error
    /// (reported to the consumer as `IB_EVENT_CQ_ERR`).
    Overflow,
}

struct Ring {
    /// Fixed capacity, allocated at creation: the packet path never allocates.
    slots: KVec<Option<Wc>>,
    head: usize,
    len: usize,
    arm: Arm,
    overflowed: bool,
    /// The completion ring of a process's CQ: completions go there instead of
    /// `slots` and the process polls without entering the kernel.
    user: Option<UserCq>,
}

/// A completion queue.
///
/// # Invariants
///
/// `ring.slots.len()` is the capacity fixed at creation; `ring.len <= capacity`.
#[pin_data]
pub(crate) struct Cq {
    /// Guards the ring; taken by the QP work that completes into it and by
    /// pollers, which may run in softirq (`IB_POLL_SOFTIRQ` consumers), hence a
    /// softirq-excluding spinlock; nothing allocates or sleeps under it.
    #[pin]
    ring: crate::ffi::SpinLockBh<Ring>,
    /// Completions the CQ holds (`cqe`).
    cap: u32,
}

impl Cq {
    /// Checks a requested CQ size (`EINVAL` above [`MAX_CQE`] or for 0).
    pub(crate) fn check_size(cqe: u32) -> Result {
        if cqe == 0 || cqe > MAX_CQE {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// A CQ able to hold `cqe` completions (`EINVAL` above [`MAX_CQE`] or for 0),
    /// delivering them into `user` if given.
    pub(crate) fn new(cqe: u32, user: Option<UserCq>) -> Result<impl PinInit<Self, Error>> {
        Self::check_size(cqe)?;
        // A mapped CQ keeps nothing in the kernel.
        let n = if user.is_some() { 1 } else { cqe as usize };
        let mut slots = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(None, GFP_KERNEL)?;
        }
        let cap = cqe;
        let ring = Ring { slots, head: 0, len: 0, arm: Arm::None, overflowed: false, user };
        Ok(try_pin_init!(Self {
            cap,
            ring <- crate::ffi::new_spinlock_bh!(ring, "metaroce_cq"),
        }))
    }

    /// Capacity (the `cqe` reported back to the consumer).
    pub(crate) fn capacity(&self) -> u32 {
        self.cap
    }

    /// Adds a completion (called by the data path, possibly in softirq context).
    pub(crate) fn push(&self, wc: Wc, solicited: bool) -> Pushed {
        let mut r = self.ring.lock();
        if r.overflowed {
            return Pushed::Overflow;
        }
        if let Some(u) = r.user.as_mut() {
            if !u.push(&wc) {
                r.overflowed = true;
                return Pushed::Overflow;
            }
        } else {
            let cap = r.slots.len();
            if r.len == cap {
                r.overflowed = true;
                return Pushed::Overflow;
            }
            let tail = (r.head + r.len) % cap;
            r.slots[tail] = Some(wc);
            r.len += 1;
        }
        let notify = match r.arm {
            Arm::None => false,
            Arm::Next => true,
            Arm::Solicited => solicited || wc.status != WcStatus::Success,
        };
        if notify {
            r.arm = Arm::None;
        }
        Pushed::Stored { notify }
    }

    /// Removes up to `max` completions in order, handing each to `f`.
    pub(crate) fn poll(&self, max: usize, mut f: impl FnMut(usize, &Wc)) -> usize {
        let mut r = self.ring.lock();
        let cap = r.slots.len();
        let mut n = 0;
        while n < max && r.len > 0 {
            let head = r.head;
            if let Some(wc) = r.slots[head].take() {
                f(n, &wc);
            }
            r.head = (head + 1) % cap;
            r.len -= 1;
            n += 1;
        }
        n
    }

    /// Drops every completion of QP `qpn` (the QP is being destroyed: nothing may
    /// refer to it afterwards). Order of the others is kept.
    pub(crate) fn purge_qp(&self, qpn: u32) {
        let mut r = self.ring.lock();
        let cap = r.slots.len();
        let (head, len) = (r.head, r.len);
        let mut kept = 0;
        for i in 0..len {
            let from = (head + i) % cap;
            let wc = r.slots[from].take();
            if let Some(wc) = wc.filter(|w| w.qpn != qpn) {
                let to = (head + kept) % cap;
                r.slots[to] = Some(wc);
                kept += 1;
            }
        }
        r.len = kept;
    }

    /// Arms the CQ; returns whether completions are already waiting (for
    /// `IB_CQ_REPORT_MISSED_EVENTS`).
    pub(crate) fn arm(&self, arm: Arm) -> bool {
        let mut r = self.ring.lock();
        // A pending "next" request is not downgraded by a later "solicited" one.
        if !(r.arm == Arm::Next && arm == Arm::Solicited) {
            r.arm = arm;
        }
        r.len > 0 || r.user.as_ref().is_some_and(|u| u.pending())
    }
}

#[kunit_tests(rdma_metaroce_cq)]
mod tests {
    use super::*;

    fn wc(id: u64, status: WcStatus) -> Wc {
        Wc {
            qpn: 1,
            qp_handle: 0,
            wr_id: id,
            status,
            opcode: WcOpcode::Send,
            byte_len: 0,
            src_qp: 0,
            imm: None,
            invalidated_rkey: None,
            grh: Grh::None,
        }
    }

    #[test]
    fn completions_come_out_in_order_and_overflow_is_reported() -> Result {
        let cq = KBox::pin_init(Cq::new(2, None)?, GFP_KERNEL)?;
        assert_eq!(cq.push(wc(1, WcStatus::Success), false), Pushed::Stored { notify: false });
        assert_eq!(cq.push(wc(2, WcStatus::Success), false), Pushed::Stored { notify: false });
        assert_eq!(cq.push(wc(3, WcStatus::Success), false), Pushed::Overflow);
        let mut seen = [0u64; 4];
        let n = cq.poll(4, |i, w| seen[i] = w.wr_id);
        assert_eq!(n, 2);
        assert_eq!(&seen[..2], &[1, 2]);
        Ok(())
    }

    #[test]
    fn arming_notifies_once_and_respects_solicited() -> Result {
        let cq = KBox::pin_init(Cq::new(8, None)?, GFP_KERNEL)?;
        assert!(!cq.arm(Arm::Solicited));
        assert_eq!(cq.push(wc(1, WcStatus::Success), false), Pushed::Stored { notify: false });
        assert_eq!(cq.push(wc(2, WcStatus::Success), true), Pushed::Stored { notify: true });
        assert_eq!(cq.push(wc(3, WcStatus::Success), true), Pushed::Stored { notify: false });
        assert!(cq.arm(Arm::Next));
        assert_eq!(cq.push(wc(4, WcStatus::RetryExcErr), false), Pushed::Stored { notify: true });
        assert!(Cq::new(0, None).is_err());
        assert!(Cq::new(MAX_CQE + 1, None).is_err());
        Ok(())
    }
}
