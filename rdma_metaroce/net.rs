// SPDX-License-Identifier: GPL-2.0

//! The receive side of a MetaRoCE device and its counters: every datagram that
//! reaches the device's UDP port is routed on its headers by the protocol core and
//! parsed in full by the QP it goes to (or here, if none takes it); malformed ones
//! are dropped and counted (spec: malformed input is dropped without a response),
//! and well-formed ones are handled by their destination QP. The data
//! path's own counters (transmit, loss recovery, access errors) are added here too.
//!
//! Runs in softirq context: no sleeping, no allocation.

use crate::ffi::IbDev;
use crate::proto::wire::WireError;
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
    /// Datagrams sent.
    TxPackets,
    /// Bytes of MetaRoCE payload sent (after the UDP header).
    TxBytes,
    /// Datagrams that could not be sent (no route, no memory): lost to the protocol.
    TxFailed,
    /// Datagrams sent with their payload attached as pages of the memory it came
    /// from rather than copied (`zero_copy_tx`).
    TxZeroCopy,
    /// Data packets sent again.
    Retransmits,
    /// Per-path retransmission timeouts.
    PathTimeouts,
    /// Of those, paths declared failed because their packets kept being overtaken
    /// by other paths' (spec MR-5.3.3) rather than by their own timer.
    PathTimeoutsOvertaken,
    /// Connection retransmission timeouts (no progress on any path).
    RtoTimeouts,
    /// Tail loss probes sent.
    TailProbes,
    /// Path probes sent: payload-less packets that test a suspect or failed path
    /// (spec MR-6.4).
    PathProbes,
    /// Losses detected from selective acknowledgements and repaired.
    SackRecovered,
    /// Receiver-not-ready NAKs sent.
    RnrNaks,
    /// Duplicate data packets received (their data was already placed).
    RxDuplicates,
    /// Packets a connection rejected after demultiplexing (wrong path, bad state).
    RxInvalid,
    /// Accesses refused by a memory key, protection domain, right or bounds check.
    AccessErrors,
    /// UD datagrams dropped (wrong Q_Key, no receive posted, too long).
    UdDropped,
    /// UC messages a responder could not place and dropped (spec MR-4.6.2).
    UcDropped,
    /// Data packets that arrived with the IP ECN field set to CE.
    EcnMarked,
    /// Data packets placed ahead of a missing earlier one (out-of-order placement).
    OutOfOrder,
    /// Acknowledgements sent as packets of their own (ACKs and NAKs).
    AcksSent,
    /// Acknowledgements carried by data packets instead (spec MR-5.4.6).
    AcksPiggybacked,
    /// Paths given a new UDP source port, for any reason: failed (MR-6.3.2),
    /// unanswered probes (MR-6.4.3) or hot (MR-6.3.4).
    Repaths,
    /// Of those, paths moved off a congested or shared route (MR-6.3.4).
    CongestionRepaths,
    /// Of those, paths moved because the receiver asked (MR-6.3.5).
    MovedPaths,
    /// ACKs this device sent asking its peer to move a path: one connection's
    /// paths crowded on one of its CPUs (MR-6.3.5).
    MoveRequests,
    /// READ responses whose retransmission could no longer read the memory
    /// (its R_Key invalidated after the requester had them, most likely) and
    /// went out as a NAK, the QP staying up (MR-5.6.5).
    StaleReadNaks,
    /// Send doorbells: a process posted sends into a QP's mapped ring.
    Doorbells,
    /// Work requests a process posted through uverbs commands (SRQs, or a
    /// provider that does not map the rings).
    CmdPosts,
    /// Poll commands on a process's CQ (a provider that does not map the ring).
    CmdPolls,
    /// Accesses that found on-demand memory not resident and were put off
    /// (spec MR-9.2.5).
    OdpFaults,
    /// Page faults the QPs' fault work served (memory brought in for them).
    OdpFaultsServed,
    /// Datagrams handed to another CPU for their QP's run (spec MR-10.3.5).
    RxSteered,
    /// Pieces of received payload copied into memory after their QP's lock was
    /// released (spec MR-10.1.3).
    RxUnlockedCopies,
}

/// Counter names as shown by `rdma statistic show link DEV/1`.
pub(crate) const COUNTER_NAMES: [&core::ffi::CStr; 38] = [
    c"rx_packets",
    c"rx_bytes",
    c"rx_malformed",
    c"rx_no_connection",
    c"rx_dropped",
    c"tx_packets",
    c"tx_bytes",
    c"tx_failed",
    c"tx_zero_copy",
    c"retransmits",
    c"path_timeouts",
    c"path_timeouts_overtaken",
    c"rto_timeouts",
    c"tail_probes",
    c"path_probes",
    c"sack_recovered",
    c"rnr_naks",
    c"rx_duplicates",
    c"rx_invalid",
    c"access_errors",
    c"ud_dropped",
    c"uc_dropped",
    c"ecn_marked",
    c"out_of_order",
    c"acks_sent",
    c"acks_piggybacked",
    c"repaths",
    c"congestion_repaths",
    c"moved_paths",
    c"move_requests",
    c"stale_read_naks",
    c"doorbells",
    c"cmd_posts",
    c"cmd_polls",
    c"odp_faults",
    c"odp_faults_served",
    c"rx_steered",
    c"rx_unlocked_copies",
];

/// Per-device counters (lock-free; updated from softirq).
pub(crate) struct Counters([AtomicU64; COUNTER_NAMES.len()]);

impl Counters {
    pub(crate) const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; COUNTER_NAMES.len()])
    }

    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// [`Counters::add`], skipping the atomic operation when `n` is 0.
    pub(crate) fn add_nonzero(&self, c: Counter, n: u64) {
        if n != 0 {
            self.add(c, n);
        }
    }

    /// A snapshot, in [`COUNTER_NAMES`] order.
    pub(crate) fn snapshot(&self) -> [u64; COUNTER_NAMES.len()] {
        core::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Counts a datagram of `bytes` UDP payload bytes addressed to `dev`'s MetaRoCE
/// port, given where the core routes it: the destination QP number, `None`
/// (counted as malformed) for a datagram whose headers do not route.
pub(crate) fn receive(dev: &IbDev, bytes: usize, parsed: Result<u32, WireError>) -> Option<u32> {
    let c = &dev.data().counters;
    c.add(Counter::RxPackets, 1);
    c.add(Counter::RxBytes, bytes as u64);
    match parsed {
        Err(_) => {
            c.add(Counter::RxMalformed, 1);
            None
        }
        Ok(qpn) => Some(qpn),
    }
}

/// A datagram whose headers routed it but which does not parse (counted where it
/// ends: here when no QP takes it, else by the QP's engine).
pub(crate) fn receive_malformed(dev: &IbDev) {
    dev.data().counters.add(Counter::RxMalformed, 1);
}

/// A well-formed packet whose destination QP does not exist (or is not connected).
pub(crate) fn receive_no_connection(dev: &IbDev) {
    dev.data().counters.add(Counter::RxNoConnection, 1);
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
        assert_eq!(COUNTER_NAMES[Counter::PathTimeoutsOvertaken as usize], c"path_timeouts_overtaken");
        assert_eq!(COUNTER_NAMES[Counter::CmdPolls as usize], c"cmd_polls");
        assert_eq!(COUNTER_NAMES[Counter::TxZeroCopy as usize], c"tx_zero_copy");
        assert_eq!(COUNTER_NAMES[Counter::CongestionRepaths as usize], c"congestion_repaths");
        assert_eq!(COUNTER_NAMES[Counter::MovedPaths as usize], c"moved_paths");
        assert_eq!(COUNTER_NAMES[Counter::MoveRequests as usize], c"move_requests");
        assert_eq!(COUNTER_NAMES[Counter::StaleReadNaks as usize], c"stale_read_naks");
        assert_eq!(COUNTER_NAMES[Counter::RxSteered as usize], c"rx_steered");
        assert_eq!(COUNTER_NAMES[Counter::RxUnlockedCopies as usize], c"rx_unlocked_copies");
        assert_eq!(COUNTER_NAMES[Counter::PathProbes as usize], c"path_probes");
    }
}
