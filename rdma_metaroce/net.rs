// SPDX-License-Identifier: GPL-2.0

//! The receive side of a MetaRoCE device and its counters: every datagram that
//! reaches the device's UDP port is parsed by the protocol core; malformed ones are
//! dropped and counted (spec: malformed input is dropped without a response), and
//! well-formed ones are handed to the connection of their destination QP.
//!
//! Runs in softirq context: no sleeping, no allocation.

use crate::ffi::IbDev;
use crate::proto::wire::PacketRepr;
use core::sync::atomic::{AtomicU64, Ordering};

/// The device counters, in the order `rdma statistic` lists them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Datagrams received on the MetaRoCE port.
    RxPackets,
    /// Bytes of MetaRoCE payload received (after the UDP header).
    RxBytes,
    /// Datagrams dropped because the core rejected them as malformed.
    RxMalformed,
    /// Well-formed packets for a QP that has no connection on this device.
    RxNoConnection,
    /// Datagrams the network stack could not hand over (unreadable, bad UDP length).
    RxDropped,
}

/// Counter names as shown by `rdma statistic show link DEV/1`.
pub(crate) const COUNTER_NAMES: [&core::ffi::CStr; 5] =
    [c"rx_packets", c"rx_bytes", c"rx_malformed", c"rx_no_connection", c"rx_dropped"];

/// Per-device counters (lock-free; updated from softirq).
pub(crate) struct Counters([AtomicU64; COUNTER_NAMES.len()]);

impl Counters {
    pub(crate) const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; COUNTER_NAMES.len()])
    }

    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// A snapshot, in [`COUNTER_NAMES`] order.
    pub(crate) fn snapshot(&self) -> [u64; COUNTER_NAMES.len()] {
        core::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// One received datagram: the bytes after the UDP header and what the core needs
/// from the lower headers.
pub(crate) struct Datagram<'a> {
    pub(crate) payload: &'a [u8],
    pub(crate) src_port: u16,
    pub(crate) ecn_ce: bool,
}

/// Handles a datagram addressed to `dev`'s MetaRoCE port.
pub(crate) fn receive(dev: &IbDev, d: &Datagram<'_>) {
    let c = &dev.data().counters;
    c.add(Counter::RxPackets, 1);
    c.add(Counter::RxBytes, d.payload.len() as u64);
    match PacketRepr::parse(d.payload) {
        Err(_) => c.add(Counter::RxMalformed, 1),
        // No QP is attached to a connection yet (the send/receive data path is not
        // implemented), so every well-formed packet has no connection to go to.
        Ok(_) => c.add(Counter::RxNoConnection, 1),
    }
    let _ = (d.src_port, d.ecn_ce);
}

/// A datagram the stack could not hand over intact.
pub(crate) fn receive_unreadable(dev: &IbDev) {
    dev.data().counters.add(Counter::RxDropped, 1);
}

#[kernel::prelude::kunit_tests(rdma_metaroce_net)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_snapshot_in_name_order() {
        let c = Counters::new();
        c.add(Counter::RxPackets, 2);
        c.add(Counter::RxMalformed, 1);
        let s = c.snapshot();
        assert_eq!(s[Counter::RxPackets as usize], 2);
        assert_eq!(s[Counter::RxMalformed as usize], 1);
        assert_eq!(s[Counter::RxDropped as usize], 0);
        assert_eq!(COUNTER_NAMES[Counter::RxNoConnection as usize], c"rx_no_connection");
    }
}
