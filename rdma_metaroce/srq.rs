// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: size limits, resizing (`ibv_modify_srq` with
//! `IBV_SRQ_MAX_WR`) and the limit event threshold (`IBV_SRQ_LIMIT`). Receive WQEs posted to an SRQ are consumed
//! by the data path of the QPs attached to it.

use crate::engine::Sge;
use crate::qp::{MAX_QP_WR, MAX_SGE};
use kernel::prelude::*;

/// SRQs per device (`max_srq`).
pub(crate) const MAX_SRQ: u32 = 4096;

/// Sizes and threshold of an SRQ (`struct ib_srq_attr`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct SrqAttrs {
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    /// Raise `IB_EVENT_SRQ_LIMIT_REACHED` when fewer WQEs remain; 0: disarmed.
    pub(crate) limit: u32,
}

#[derive(Clone, Copy)]
struct Wqe {
    wr_id: u64,
    nsge: u16,
}

/// The queue of an SRQ: posted receive WQEs in order, storage fixed at creation.
struct Queue {
    attrs: SrqAttrs,
    wqes: KVec<Option<Wqe>>,
    sges: KVec<Sge>,
    head: u32,
    tail: u32,
    /// The queue fell below its armed limit and the event is not yet reported.
    limit_event: bool,
}

impl Queue {
    fn len(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }
    fn slot(&self, i: u32) -> usize {
        (i % self.attrs.max_wr) as usize
    }
}

/// A WQE taken from an SRQ by a QP.
pub(crate) struct Taken {
    pub(crate) wr_id: u64,
    pub(crate) nsge: usize,
}

/// A shared receive queue.
#[pin_data]
pub(crate) struct Srq {
    /// Attributes and WQEs; taken by `modify_srq`/`post_srq_recv` (possibly from
    /// softirq) and by the data path of attached QPs (under their engine lock).
    /// Nothing sleeps under it.
    #[pin]
    q: crate::ffi::SpinLockBh<Queue>,
}

impl Srq {
    /// Checks creation sizes (`EINVAL` beyond the device limits or for a zero queue).
    pub(crate) fn new(a: SrqAttrs) -> Result<impl PinInit<Self>> {
        if a.max_wr == 0 || a.max_wr > MAX_QP_WR || a.max_sge == 0 || a.max_sge > MAX_SGE {
            return Err(EINVAL);
        }
        if a.limit > a.max_wr {
            return Err(EINVAL);
        }
        let q = Queue {
            attrs: a,
            wqes: KVec::from_elem(None, a.max_wr as usize, GFP_KERNEL)?,
            sges: KVec::from_elem(Sge::default(), (a.max_wr * a.max_sge) as usize, GFP_KERNEL)?,
            head: 0,
            tail: 0,
            limit_event: false,
        };
        Ok(pin_init!(Self { q <- crate::ffi::new_spinlock_bh!(q, "metaroce_srq") }))
    }

    pub(crate) fn attrs(&self) -> SrqAttrs {
        self.q.lock().attrs
    }

    /// `ib_post_srq_recv` for one WQE: `EINVAL` for too many SGEs, `ENOMEM` when full.
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[Sge]) -> Result {
        let mut q = self.q.lock();
        if sges.len() > q.attrs.max_sge as usize {
            return Err(EINVAL);
        }
        if q.len() >= q.attrs.max_wr {
            return Err(ENOMEM);
        }
        let i = q.slot(q.tail);
        let base = i * q.attrs.max_sge as usize;
        q.sges[base..base + sges.len()].copy_from_slice(sges);
        q.wqes[i] = Some(Wqe { wr_id, nsge: sges.len() as u16 });
        q.tail = q.tail.wrapping_add(1);
        Ok(())
    }

    /// Takes the oldest WQE, copying its SGEs into `out` (which must hold
    /// `max_sge` entries; fewer are refused by returning `None`). When the queue
    /// falls below its armed limit, the limit is disarmed (as verbs require) and the
    /// event left for [`Srq::take_limit_event`].
    pub(crate) fn take(&self, out: &mut [Sge]) -> Option<Taken> {
        let mut q = self.q.lock();
        if q.len() == 0 {
            return None;
        }
        let i = q.slot(q.head);
        let w = q.wqes[i]?;
        let n = w.nsge as usize;
        let base = i * q.attrs.max_sge as usize;
        out.get_mut(..n)?.copy_from_slice(&q.sges[base..base + n]);
        q.wqes[i] = None;
        q.head = q.head.wrapping_add(1);
        if q.attrs.limit != 0 && q.len() < q.attrs.limit {
            q.attrs.limit = 0;
            q.limit_event = true;
        }
        Some(Taken { wr_id: w.wr_id, nsge: n })
    }

    /// Whether `IB_EVENT_SRQ_LIMIT_REACHED` is due (once per arming).
    pub(crate) fn take_limit_event(&self) -> bool {
        core::mem::take(&mut self.q.lock().limit_event)
    }

    /// The largest number of SGEs a WQE of this SRQ may have.
    pub(crate) fn max_sge(&self) -> u32 {
        self.q.lock().attrs.max_sge
    }

    /// `modify_srq`: `resize` gives the queue room for that many WQEs, keeping
    /// those posted in order (`EINVAL` for 0, beyond the device limit, for fewer
    /// than are posted, or below the limit in force); `limit` arms the limit event
    /// (`EINVAL` above the queue size, the new one if both are given).
    pub(crate) fn modify(&self, resize: Option<u32>, limit: Option<u32>) -> Result {
        // The new storage is allocated before the lock (nothing allocates under it);
        // whatever the swap leaves in `spare` is freed after the lock is released.
        let mut spare = match resize {
            Some(n) if n == 0 || n > MAX_QP_WR => return Err(EINVAL),
            Some(n) => {
                let max_sge = self.max_sge() as usize;
                Some((KVec::from_elem(None, n as usize, GFP_KERNEL)?, KVec::from_elem(Sge::default(), n as usize * max_sge, GFP_KERNEL)?))
            }
            None => None,
        };
        let mut q = self.q.lock();
        let max_wr = resize.unwrap_or(q.attrs.max_wr);
        let new_limit = limit.unwrap_or(q.attrs.limit);
        if new_limit > max_wr || q.len() > max_wr {
            return Err(EINVAL);
        }
        if let Some((wqes, sges)) = spare.as_mut() {
            let max_sge = q.attrs.max_sge as usize;
            for k in 0..q.len() {
                let from = q.slot(q.head.wrapping_add(k));
                let to = k as usize;
                wqes[to] = q.wqes[from].take();
                sges[to * max_sge..(to + 1) * max_sge].copy_from_slice(&q.sges[from * max_sge..(from + 1) * max_sge]);
            }
            q.tail = q.len();
            q.head = 0;
            core::mem::swap(&mut q.wqes, wqes);
            core::mem::swap(&mut q.sges, sges);
            q.attrs.max_wr = max_wr;
        }
        q.attrs.limit = new_limit;
        drop(q);
        drop(spare);
        Ok(())
    }
}

#[kunit_tests(rdma_metaroce_srq)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_limit_are_checked() -> Result {
        let ok = SrqAttrs { max_wr: 64, max_sge: 2, limit: 0 };
        assert!(Srq::new(SrqAttrs { max_wr: MAX_QP_WR + 1, ..ok }).is_err());
        assert!(Srq::new(SrqAttrs { max_sge: 0, ..ok }).is_err());
        let srq = KBox::pin_init(Srq::new(ok)?, GFP_KERNEL)?;
        assert_eq!(srq.modify(None, Some(65)), Err(EINVAL));
        assert_eq!(srq.modify(None, Some(16)), Ok(()));
        assert_eq!(srq.attrs().limit, 16);
        // Below the limit in force.
        assert_eq!(srq.modify(Some(8), None), Err(EINVAL));
        assert_eq!(srq.modify(Some(MAX_QP_WR + 1), None), Err(EINVAL));
        assert_eq!(srq.modify(Some(128), None), Ok(()));
        assert_eq!(srq.attrs().max_wr, 128);
        Ok(())
    }

    #[test]
    fn resizing_keeps_posted_wqes_in_order() -> Result {
        let srq = KBox::pin_init(Srq::new(SrqAttrs { max_wr: 3, max_sge: 2, limit: 0 })?, GFP_KERNEL)?;
        let s = |a| Sge { addr: a, length: 8, lkey: 1 };
        let mut out = [Sge::default(); 2];
        // Wrap the ring first, so the posted WQEs do not start at slot 0.
        srq.post_recv(9, &[])?;
        srq.take(&mut out).ok_or(EINVAL)?;
        srq.post_recv(1, &[s(0x10)])?;
        srq.post_recv(2, &[s(0x20), s(0x30)])?;
        srq.post_recv(3, &[])?;
        // Fewer slots than WQEs posted.
        assert_eq!(srq.modify(Some(2), None), Err(EINVAL));
        srq.modify(Some(5), Some(2))?;
        assert_eq!(srq.attrs(), SrqAttrs { max_wr: 5, max_sge: 2, limit: 2 });
        srq.post_recv(4, &[s(0x40)])?;
        srq.post_recv(5, &[])?;
        assert_eq!(srq.post_recv(6, &[]), Err(ENOMEM));
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, t.nsge, out[0].addr), (1, 1, 0x10));
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, t.nsge, out[0].addr, out[1].addr), (2, 2, 0x20, 0x30));
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, t.nsge), (3, 0));
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, out[0].addr), (4, 0x40));
        // One WQE left, under the limit of 2.
        assert!(srq.take_limit_event());
        srq.modify(Some(1), None)?;
        assert_eq!(srq.take(&mut out).map(|t| t.wr_id), Some(5));
        assert!(srq.take(&mut out).is_none());
        Ok(())
    }

    #[test]
    fn wqes_come_out_in_order_and_the_limit_fires_once() -> Result {
        let srq = KBox::pin_init(Srq::new(SrqAttrs { max_wr: 4, max_sge: 2, limit: 0 })?, GFP_KERNEL)?;
        let s = |a| Sge { addr: a, length: 8, lkey: 1 };
        srq.post_recv(1, &[s(0x10)])?;
        srq.post_recv(2, &[s(0x20), s(0x30)])?;
        srq.post_recv(3, &[])?;
        srq.post_recv(4, &[])?;
        assert_eq!(srq.post_recv(5, &[]), Err(ENOMEM));
        assert_eq!(srq.post_recv(5, &[s(1), s(2), s(3)]), Err(EINVAL));
        srq.modify(None, Some(3))?;
        let mut out = [Sge::default(); 2];
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, t.nsge, srq.take_limit_event()), (1, 1, false));
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, t.nsge, out[1].addr), (2, 2, 0x30));
        assert!(srq.take_limit_event());
        assert!(!srq.take_limit_event());
        let t = srq.take(&mut out).ok_or(EINVAL)?;
        assert_eq!((t.wr_id, srq.take_limit_event()), (3, false));
        assert!(srq.take(&mut out).is_some());
        assert!(srq.take(&mut out).is_none());
        Ok(())
    }
}
