// SPDX-License-Identifier: GPL-2.0

//! Network I/O of a device: the UDP receive callback and the `rdma statistic`
//! (hardware counter) ops.

use super::{raw, IbDev};
use crate::net::COUNTER_NAMES;
use core::ffi::c_int;

/// Receive callback of a device's UDP socket (udp_tunnel `encap_rcv`), in softirq.
///
/// # Safety
///
/// Called by the UDP stack with a socket set up by `mrc_udp_open` (user data: one of
/// this driver's devices, alive while the socket is) and an skb we now own.
pub(super) unsafe extern "C" fn udp_rcv_cb(sk: *mut raw::sock, skb: *mut raw::sk_buff) -> c_int {
    // SAFETY: RCU-protected user data of our socket; NULL once closing has begun.
    let ib = unsafe { raw::mrc_sk_user_data(sk) }.cast::<raw::ib_device>();
    if !ib.is_null() {
        // SAFETY: The device outlives its socket (see `IbDev::create`).
        let dev = unsafe { IbDev::from_raw(ib) };
        // The QP's run reads the payload again (it then knows whether the QP takes
        // it in pieces) and parses it; here only the headers matter, and they are
        // made linear. A datagram no QP parses is parsed here, so that one that
        // does not parse counts as malformed wherever it ends (spec MR-3.1.5).
        // SAFETY: `skb` is a received UDP datagram we own, unmodified until it is
        // handed on below, after the last use of `d`.
        let mut pieces = super::datapath::Pieces::new();
        let d = unsafe { super::datapath::UdpPayload::with_headers(skb, &mut pieces) };
        if let Some((d, routed)) = d {
            let len = d.len();
            let qpn = crate::net::receive(dev, len, routed.as_ref().map(|to| to.qpn).map_err(|e| *e));
            if let (Some(qpn), Ok(to)) = (qpn, routed) {
                if qpn == crate::proto::ud::MULTICAST_QPN {
                    if !d.parses() {
                        crate::net::receive_malformed(dev);
                    } else {
                        // SAFETY: We own the skb; it is consumed (`d` is not
                        // used after this).
                        if unsafe { super::datapath::deliver_multicast(dev, skb) } == 0 {
                            crate::net::receive_no_connection(dev);
                        }
                        return 0;
                    }
                } else {
                    let arrival = super::datapath::arrival_of(&to, len);
                    // SAFETY: We own the skb; on success the QP's queue owns it.
                    match unsafe { super::datapath::deliver(dev, qpn, (!to.ack).then_some(to.path), arrival, skb) } {
                        Ok(()) => return 0,
                        Err(_) if d.parses() => crate::net::receive_no_connection(dev),
                        Err(_) => crate::net::receive_malformed(dev),
                    }
                }
            }
        } else {
            crate::net::receive_unreadable(dev);
        }
    }
    // SAFETY: We own the skb; returning 0 tells UDP it was consumed.
    unsafe { raw::mrc_kfree_skb(skb) };
    0
}

/// `rdma_stat_desc` table in a static.
struct Descs([raw::rdma_stat_desc; COUNTER_NAMES.len()]);

// SAFETY: Immutable; the pointers are to static C strings.
unsafe impl Sync for Descs {}

static DESCS: Descs = Descs({
    let mut d = [raw::rdma_stat_desc { name: core::ptr::null(), flags: 0, priv_: core::ptr::null() };
        COUNTER_NAMES.len()];
    let mut i = 0;
    while i < COUNTER_NAMES.len() {
        d[i].name = COUNTER_NAMES[i].as_ptr();
        i += 1;
    }
    d
});

pub(super) unsafe extern "C" fn alloc_hw_port_stats_cb(
    _ib: *mut raw::ib_device,
    _port: u32,
) -> *mut raw::rdma_hw_stats {
    // SAFETY: `DESCS` is static and describes COUNTER_NAMES.len() counters.
    unsafe {
        raw::rdma_alloc_hw_stats_struct(
            DESCS.0.as_ptr(),
            COUNTER_NAMES.len() as c_int,
            raw::RDMA_HW_STATS_DEFAULT_LIFESPAN.into(),
        )
    }
}

pub(super) unsafe extern "C" fn get_hw_stats_cb(
    ib: *mut raw::ib_device,
    stats: *mut raw::rdma_hw_stats,
    _port: u32,
    _index: c_int,
) -> c_int {
    // SAFETY: ib_core calls this on live devices of this driver with the stats
    // struct `alloc_hw_port_stats` made, which has COUNTER_NAMES.len() values.
    let (dev, values) = unsafe {
        (IbDev::from_raw(ib), (*stats).value.as_mut_slice(COUNTER_NAMES.len()))
    };
    for (v, c) in values.iter_mut().zip(dev.data().counters.snapshot()) {
        *v = c;
    }
    COUNTER_NAMES.len() as c_int
}
