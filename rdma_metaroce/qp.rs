// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: creation limits, QP numbers, and the verbs attribute state
//! (`modify_qp`/`query_qp`). The legality of a state transition with a given
//! attribute mask is ib_core's rule (`ib_modify_qp_is_ok`, checked in the FFI layer);
//! this module validates the values and keeps them. The transport state of a
//! connected QP lives in the protocol core (`proto::Connection`).

use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::new_mutex;

/// Per-QP work request limits advertised in `query_device`.
pub(crate) const MAX_QP_WR: u32 = 16384;
/// Scatter/gather entries per work request.
pub(crate) const MAX_SGE: u32 = 32;
/// Inline data per send work request, in bytes.
pub(crate) const MAX_INLINE: u32 = 256;
/// QP slots per device (`max_qp`). QP numbers are `salt << 14 | slot`.
pub(crate) const MAX_QP: u32 = 1 << 14;
/// Largest RDMA read/atomic depth (`max_qp_rd_atom`): what the transport keeps
/// outstanding (spec MR-4.4.2), so that an application asking for more is told
/// (EINVAL) instead of getting fewer than it set.
pub(crate) const MAX_RD_ATOMIC: u8 = crate::proto::wire::MAX_RD_ATOMIC;
/// Microseconds between looks at a resetting QP's copies (see `Qp::wait_for_copies`).
const COPY_WAIT_POLL_US: i64 = 20;

/// Transport service of a QP.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum QpType {
    Rc,
    /// Verbs UC: an RC connection carrying SEND and WRITE messages only, whose
    /// responder drops a WRITE it cannot place instead of NAKing it (spec MR-4.6).
    Uc,
    Ud,
}

impl QpType {
    /// A connected service: the QP talks to one peer QP over a connection.
    pub(crate) fn connected(self) -> bool {
        matches!(self, QpType::Rc | QpType::Uc)
    }
}

/// Verbs QP states (`enum ib_qp_state` values).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

impl QpState {
    pub(crate) fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }
}

/// Queue sizes requested at creation (`struct ib_qp_cap`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct QpCaps {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

impl QpCaps {
    /// Checks requested sizes against the device limits (`EINVAL` beyond them, as
    /// rdma-core's tests expect); a QP attached to an SRQ has no receive queue.
    pub(crate) fn validate(self, has_srq: bool) -> Result<Self> {
        let over = self.max_send_wr > MAX_QP_WR
            || self.max_recv_wr > MAX_QP_WR
            || self.max_send_sge > MAX_SGE
            || self.max_recv_sge > MAX_SGE
            || self.max_inline_data > MAX_INLINE;
        if over {
            return Err(EINVAL);
        }
        let mut caps = self;
        if has_srq {
            caps.max_recv_wr = 0;
            caps.max_recv_sge = 0;
        }
        Ok(caps)
    }
}

/// Attributes a `modify_qp` call supplies (`None`: not in the mask).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct QpUpdate {
    pub(crate) state: Option<QpState>,
    pub(crate) access_flags: Option<u32>,
    pub(crate) port: Option<u32>,
    pub(crate) qkey: Option<u32>,
    /// Destination GID (an IPv4-mapped or IPv6 address) of the address vector.
    pub(crate) remote_gid: Option<[u8; 16]>,
    pub(crate) path_mtu: Option<u32>,
    pub(crate) timeout: Option<u8>,
    pub(crate) retry_cnt: Option<u8>,
    pub(crate) rnr_retry: Option<u8>,
    pub(crate) rq_psn: Option<u32>,
    pub(crate) sq_psn: Option<u32>,
    pub(crate) max_rd_atomic: Option<u8>,
    pub(crate) max_dest_rd_atomic: Option<u8>,
    pub(crate) min_rnr_timer: Option<u8>,
    pub(crate) dest_qpn: Option<u32>,
}

/// The verbs-visible attributes of a QP (what `query_qp` reports).
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpAttrs {
    pub(crate) state: QpState,
    pub(crate) access_flags: u32,
    pub(crate) port: u32,
    pub(crate) qkey: u32,
    pub(crate) remote_gid: [u8; 16],
    pub(crate) path_mtu: u32,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) dest_qpn: u32,
    /// `sq_psn` was given (it is an RTS attribute; a responder left in RTR never
    /// gets one).
    pub(crate) sq_psn_set: bool,
}

impl QpAttrs {
    fn new() -> Self {
        Self {
            state: QpState::Reset,
            access_flags: 0,
            port: 1,
            qkey: 0,
            remote_gid: [0; 16],
            path_mtu: 3, // IB_MTU_1024
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            dest_qpn: 0,
            sq_psn_set: false,
        }
    }

    /// Applies a modification whose transition ib_core has already accepted.
    /// Values are range-checked (`EINVAL`); on error nothing changes.
    fn apply(&mut self, u: &QpUpdate) -> Result {
        let psn_ok = |p: Option<u32>| p.is_none_or(|p| p < (1 << 24));
        let qpn_ok = u.dest_qpn.is_none_or(|q| q < (1 << 24));
        let mtu_ok = u.path_mtu.is_none_or(|m| (1..=5).contains(&m));
        let port_ok = u.port.is_none_or(|p| p == 1);
        let rd_ok = u.max_rd_atomic.is_none_or(|n| n <= MAX_RD_ATOMIC)
            && u.max_dest_rd_atomic.is_none_or(|n| n <= MAX_RD_ATOMIC);
        let retry_ok = u.retry_cnt.is_none_or(|n| n <= 7) && u.rnr_retry.is_none_or(|n| n <= 7);
        if !(psn_ok(u.rq_psn) && psn_ok(u.sq_psn) && qpn_ok && mtu_ok && port_ok && rd_ok && retry_ok) {
            return Err(EINVAL);
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = u.$f { self.$f = v; } )* };
        }
        set!(state, access_flags, port, qkey, remote_gid, path_mtu, timeout, retry_cnt, rnr_retry,
             rq_psn, sq_psn, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, dest_qpn);
        self.sq_psn_set |= u.sq_psn.is_some();
        Ok(())
    }
}

/// How the data path of the device's connections is tuned (module parameters).
pub(crate) struct Tuning {
    /// Paths each connection sprays over.
    pub(crate) num_paths: u8,
    /// RC payload bytes per packet beyond `path_mtu` ([`crate::device::rc_mtu_for`]).
    pub(crate) rc_mtu: u32,
    /// Timers and congestion control.
    pub(crate) conn: crate::engine::ConnTuning,
}

/// A queue pair (the driver's part of `struct ib_qp`).
#[pin_data]
pub(crate) struct Qp {
    pub(crate) qpn: u32,
    pub(crate) ty: QpType,
    pub(crate) caps: QpCaps,
    /// Its process posts work requests into rings mapped into it (fixed at
    /// creation): a post is a doorbell, and needs no look at the engine to say so.
    pub(crate) mapped: bool,
    /// Verbs attributes; changed only by `modify_qp` (process context).
    #[pin]
    attrs: Mutex<QpAttrs>,
    /// The data path. Taken by the posting verbs (task context, softirq, or with
    /// interrupts off; never in a hard interrupt handler) and by the QP's work,
    /// after `attrs` when both are needed; softirq-excluding, so a consumer posting
    /// from a softirq completion handler cannot interrupt the work holding it.
    /// Nothing under it sleeps.
    #[pin]
    pub(crate) engine: crate::ffi::SpinLockBh<crate::engine::Engine>,
    /// Spec: MR-6.3.5 — the CPUs its received paths land on (the receive softirq
    /// writes it without a lock).
    pub(crate) rx_spread: crate::spread::RxSpread,
}

impl Qp {
    pub(crate) fn new(qpn: u32, ty: QpType, caps: QpCaps, engine: crate::engine::Engine) -> impl PinInit<Self> {
        let mapped = engine.has_user_queues();
        pin_init!(Self {
            qpn,
            ty,
            caps,
            mapped,
            attrs <- new_mutex!(QpAttrs::new(), "metaroce_qp_attrs"),
            engine <- crate::ffi::new_spinlock_bh!(engine, "metaroce_qp_engine"),
            rx_spread: crate::spread::RxSpread::new(),
        })
    }

    /// The current state (ib_core passes it to `ib_modify_qp_is_ok`). A QP whose
    /// connection failed (retries exhausted) is in the error state.
    pub(crate) fn state(&self) -> QpState {
        let attrs = self.attrs.lock();
        if self.engine.lock().errored() {
            return QpState::Err;
        }
        attrs.state
    }

    /// Applies a `modify_qp` whose transition ib_core accepted, to the attributes and
    /// then to the data path, tuned by `t`.
    pub(crate) fn modify(&self, u: &QpUpdate, t: &Tuning) -> Result {
        let mut attrs = self.attrs.lock();
        let before = attrs.state;
        attrs.apply(u)?;
        let a = *attrs;
        let mut eng = self.engine.lock();
        eng.set_access(a.access_flags, a.qkey);
        let params = crate::engine::ConnectParams {
            remote_qpn: a.dest_qpn,
            remote_gid: a.remote_gid,
            sq_psn: a.sq_psn_set.then_some(a.sq_psn),
            rq_psn: a.rq_psn,
            mtu: 128 << a.path_mtu,
            rc_mtu: t.rc_mtu,
            num_paths: t.num_paths,
            max_rd_atomic: a.max_rd_atomic,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            tuning: t.conn,
        };
        match u.state {
            Some(QpState::Reset) => eng.to_reset(),
            Some(QpState::Init) if before == QpState::Reset => eng.to_init(),
            Some(QpState::Rtr) if before != QpState::Rtr => eng.to_rtr(&params),
            Some(QpState::Rts) if before != QpState::Rts => eng.to_rts(&params),
            // Spec: MR-5.4.7 — the consumer's move to ERR; the kick after the
            // modify sends the last word.
            Some(QpState::Err) => {
                eng.close();
            }
            _ => {}
        }
        drop(eng);
        if u.state == Some(QpState::Reset) {
            self.wait_for_copies();
        }
        Ok(())
    }

    /// Spec: MR-10.1.4 — returns once no run has copies outside the engine lock
    /// (MR-10.1.3) left to make: the reset discarded the receive WQEs those copies
    /// write into, and the consumer may reuse their buffers as soon as the reset
    /// returns. Process context (sleeps); the attributes' mutex keeps another
    /// modify out meanwhile.
    fn wait_for_copies(&self) {
        // A copy is a bounded memcpy in a softirq or a system call, so the wait is
        // short; a second means a run lost track of its copies, which is reported
        // rather than waited on for ever.
        let waited = kernel::io::poll::read_poll_timeout(
            || Ok(self.engine.lock().copies_under_way()),
            |busy: &bool| !*busy,
            kernel::time::Delta::from_micros(COPY_WAIT_POLL_US),
            kernel::time::Delta::from_secs(1),
        );
        if waited.is_err() {
            pr_warn!("metaroce: a QP reset while its copies stayed under way for a second\n");
        }
    }

    pub(crate) fn attrs(&self) -> QpAttrs {
        let mut a = *self.attrs.lock();
        if self.engine.lock().errored() {
            a.state = QpState::Err;
        }
        a
    }
}

#[kunit_tests(rdma_metaroce_qp)]
mod tests {
    use super::*;

    #[test]
    fn caps_beyond_device_limits_are_einval() {
        let ok = QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
        assert_eq!(ok.validate(false), Ok(ok));
        assert_eq!(ok.validate(true).map(|c| c.max_recv_wr), Ok(0));
        let big = QpCaps { max_send_wr: MAX_QP_WR + 1, ..ok };
        assert_eq!(big.validate(false), Err(EINVAL));
        let sge = QpCaps { max_recv_sge: MAX_SGE + 1, ..ok };
        assert_eq!(sge.validate(false), Err(EINVAL));
    }

    #[test]
    fn modify_checks_values_and_is_all_or_nothing() {
        let mut a = QpAttrs::new();
        let good = QpUpdate { state: Some(QpState::Init), port: Some(1), access_flags: Some(7), ..Default::default() };
        assert_eq!(a.apply(&good), Ok(()));
        assert_eq!(a.state, QpState::Init);
        let bad = QpUpdate { state: Some(QpState::Rtr), rq_psn: Some(1 << 24), ..Default::default() };
        assert_eq!(a.apply(&bad), Err(EINVAL));
        assert_eq!(a.state, QpState::Init);
        let bad_mtu = QpUpdate { path_mtu: Some(6), ..Default::default() };
        assert_eq!(a.apply(&bad_mtu), Err(EINVAL));
    }

    /// Spec: MR-10.1.4 — a reset returns only once the copies a run left for after
    /// the engine lock are made. Another thread ends them; whatever the order the
    /// two threads run in, the reset must see the end.
    #[test]
    fn reset_waits_for_copies_outside_the_lock() {
        use core::sync::atomic::{AtomicBool, Ordering};
        use kernel::sync::{Arc, Completion};
        let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let eng = crate::engine::Engine::new(QpType::Ud, 2, crate::mr::PdId(1), &caps, false, 0, None, None, 0)
            .expect("engine");
        let qp = Arc::pin_init(Qp::new(2, QpType::Ud, caps, eng), GFP_KERNEL).expect("qp");
        let shared = Arc::pin_init(
            pin_init!(CopyEnd { resetting <- Completion::new(), ended: AtomicBool::new(false) }),
            GFP_KERNEL,
        )
        .expect("completion");
        // A run released the engine with a copy still to make.
        assert_eq!(qp.engine.lock().copies_begin(), 1);
        let (qp2, shared2) = (qp.clone(), shared.clone());
        kernel::workqueue::system_unbound()
            .try_spawn(GFP_KERNEL, move || {
                shared2.resetting.wait_for_completion();
                let mut eng = qp2.engine.lock();
                shared2.ended.store(true, Ordering::Relaxed);
                eng.copies_end();
            })
            .expect("spawn");
        shared.resetting.complete_all();
        let reset = QpUpdate { state: Some(QpState::Reset), ..Default::default() };
        let tuning = Tuning { num_paths: 8, rc_mtu: 0, conn: crate::engine::ConnTuning::DEFAULT };
        assert_eq!(qp.modify(&reset, &tuning), Ok(()));
        // The copy's end was stored under the engine lock before it was counted.
        assert!(shared.ended.load(Ordering::Relaxed));
        assert!(!qp.engine.lock().copies_under_way());
    }

    /// What the copying thread of `reset_waits_for_copies_outside_the_lock` shares.
    #[pin_data]
    struct CopyEnd {
        #[pin]
        resetting: kernel::sync::Completion,
        ended: core::sync::atomic::AtomicBool,
    }

}
