// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: size limits and the limit event threshold
//! (`ibv_modify_srq` with `IBV_SRQ_LIMIT`). Receive WQEs posted to an SRQ are consumed
//! by the data path of the QPs attached to it.

use crate::qp::{MAX_QP_WR, MAX_SGE};
use kernel::new_spinlock;
use kernel::prelude::*;
use kernel::sync::SpinLock;

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

/// A shared receive queue.
#[pin_data]
pub(crate) struct Srq {
    /// Attributes; changed by `modify_srq` (process context), read by the data path.
    #[pin]
    attrs: SpinLock<SrqAttrs>,
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
        Ok(pin_init!(Self { attrs <- new_spinlock!(a, "metaroce_srq") }))
    }

    pub(crate) fn attrs(&self) -> SrqAttrs {
        *self.attrs.lock()
    }

    /// `modify_srq`: resizing is not offered (`EOPNOTSUPP`); the limit must not exceed
    /// the queue size (`EINVAL`).
    pub(crate) fn modify(&self, resize: Option<u32>, limit: Option<u32>) -> Result {
        if resize.is_some() {
            return Err(crate::ffi::eopnotsupp());
        }
        let mut a = self.attrs.lock();
        if let Some(l) = limit {
            if l > a.max_wr {
                return Err(EINVAL);
            }
            a.limit = l;
        }
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
        assert_eq!(srq.modify(Some(128), None), Err(crate::ffi::eopnotsupp()));
        Ok(())
    }
}
