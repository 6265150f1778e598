// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a bounded ring of work completions, arming for completion
//! events (`req_notify_cq`), overflow detection and resizing (`ibv_resize_cq`). Safe code; the FFI layer turns
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
        WcOpcode::BindMw => 5,
        WcOpcode::RegMr => 10,
        WcOpcode::AtomicWrite => 9,
        WcOpcode::Flush => 8,
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
    /// Completions the CQ holds (`cqe`): `slots.len()`, or the entries of `user`.
    cap: u32,
}

/// Storage for a CQ's completions, made before a resize takes the CQ's lock:
/// nothing allocates under it, and removing a ring's mapping may sleep.
pub(crate) enum CqStorage {
    /// Completions kept in the kernel (a kernel consumer's CQ, or a process's
    /// without a mapped ring).
    Kernel(KVec<Option<Wc>>),
    /// A new completion ring mapped into the process.
    User(UserCq),
}

impl CqStorage {
    /// Room for `cqe` completions kept in the kernel.
    pub(crate) fn kernel(cqe: u32) -> Result<Self> {
        Ok(Self::Kernel(KVec::from_elem(None, cqe as usize, GFP_KERNEL)?))
    }
}

/// A completion queue.
///
/// # Invariants
///
/// Without a mapped ring, `ring.slots.len()` is the capacity and `ring.len <=
/// capacity`; with one, `ring.slots` holds a single unused slot.
#[pin_data]
pub(crate) struct Cq {
    /// Guards the ring; taken by the QP work that completes into it and by
    /// pollers, which may run in softirq (`IB_POLL_SOFTIRQ` consumers), hence a
    /// softirq-excluding spinlock; nothing allocates or sleeps under it.
    #[pin]
    ring: crate::ffi::SpinLockBh<Ring>,
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
        let ring = Ring { slots, head: 0, len: 0, arm: Arm::None, overflowed: false, user, cap: cqe };
        Ok(try_pin_init!(Self {
            ring <- crate::ffi::new_spinlock_bh!(ring, "metaroce_cq"),
        }))
    }

    /// Capacity (the `cqe` reported back to the consumer).
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.lock().cap
    }

    /// Whether completions go to a ring mapped into a process (fixed at creation:
    /// a resize replaces a ring only by another).
    pub(crate) fn is_mapped(&self) -> bool {
        self.ring.lock().user.is_some()
    }

    /// Resizes the CQ to `cqe` completions with `storage`, made for that size and
    /// of the kind the CQ has ([`Self::is_mapped`]). Completions not yet polled
    /// move over in order; an armed request and an overflow stay. `EINVAL` for a
    /// size [`Self::check_size`] refuses, for fewer than the completions waiting
    /// (also when a process's consumer counter claims an impossible number), or
    /// for storage of the other kind. On return `storage` holds what the caller
    /// must free, after this returns: the old storage, or the new one if the resize
    /// failed.
    pub(crate) fn resize(&self, cqe: u32, storage: &mut CqStorage) -> Result {
        Self::check_size(cqe)?;
        let mut guard = self.ring.lock();
        let r = &mut *guard;
        match (r.user.as_mut(), storage) {
            (Some(current), CqStorage::User(new)) => {
                if new.entries() < cqe {
                    return Err(EINVAL);
                }
                current.move_waiting_into(new)?;
                core::mem::swap(current, new);
            }
            (None, CqStorage::Kernel(slots)) => {
                if slots.len() < cqe as usize || r.len > slots.len() {
                    return Err(EINVAL);
                }
                let cap = r.slots.len();
                for (k, to) in slots.iter_mut().take(r.len).enumerate() {
                    *to = r.slots[(r.head + k) % cap].take();
                }
                r.head = 0;
                core::mem::swap(&mut r.slots, slots);
            }
            _ => return Err(EINVAL),
        }
        r.cap = cqe;
        Ok(())
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

    #[test]
    fn resizing_keeps_waiting_completions_in_order() -> Result {
        let cq = KBox::pin_init(Cq::new(3, None)?, GFP_KERNEL)?;
        // Wrap the ring first, so the waiting completions do not start at slot 0.
        cq.push(wc(9, WcStatus::Success), false);
        cq.poll(1, |_, _| {});
        for id in 1..=3 {
            cq.push(wc(id, WcStatus::Success), false);
        }
        let mut spare = CqStorage::kernel(2)?;
        // Three completions wait.
        assert_eq!(cq.resize(2, &mut spare), Err(EINVAL));
        // The new storage is handed back.
        assert!(matches!(&spare, CqStorage::Kernel(v) if v.len() == 2));
        let mut spare = CqStorage::kernel(5)?;
        cq.resize(5, &mut spare)?;
        // The old storage is handed back.
        assert!(matches!(&spare, CqStorage::Kernel(v) if v.len() == 3));
        assert_eq!(cq.capacity(), 5);
        assert!(!cq.is_mapped());
        for id in 4..=5 {
            assert_eq!(cq.push(wc(id, WcStatus::Success), false), Pushed::Stored { notify: false });
        }
        assert_eq!(cq.push(wc(6, WcStatus::Success), false), Pushed::Overflow);
        let mut seen = [0u64; 8];
        assert_eq!(cq.poll(8, |i, w| seen[i] = w.wr_id), 5);
        assert_eq!(&seen[..5], &[1, 2, 3, 4, 5]);
        let mut spare = CqStorage::kernel(1)?;
        assert_eq!(cq.resize(0, &mut spare), Err(EINVAL));
        assert_eq!(cq.resize(MAX_CQE + 1, &mut spare), Err(EINVAL));
        Ok(())
    }
}
