// SPDX-License-Identifier: GPL-2.0

//! MetaRoCE: RDMA over lossy Ethernet with multipath spraying, selective
//! acknowledgement and out-of-order placement, as a software RDMA device.
//!
//! Crate root: module parameters, and module init/exit, which own the `metaroce`
//! link type and the netdev subscription. Layout:
//!
//! * [`ffi`]: the only `unsafe` code — bindings, C helpers, safe wrappers.
//! * [`device`]: device lifecycle policy (`rdma link add/del`, query ops).
//! * [`proto`]: the protocol core, compiled from `proto/src` (the same files cargo
//!   builds and tests on the host): wire formats, reliability, congestion control.

use kernel::prelude::*;

mod cq;
mod device;
mod engine;
mod ffi;
mod ids;
mod mcast;
mod mr;
mod net;
#[path = "../proto/src/lib.rs"]
pub mod proto;
mod proto_tests;
mod qp;
mod spread;
mod srq;

module! {
    type: MetaRoce,
    name: "rdma_metaroce",
    authors: ["MetaRoCE developers"],
    description: "MetaRoCE: multipath RDMA transport over lossy Ethernet (software RDMA device)",
    license: "GPL",
    alias: ["rdma-link-metaroce"],
    params: {
        udp_port: u16 {
            default: 4792,
            description: "UDP destination port of MetaRoCE (not 4791, which RoCEv2/rxe owns)",
        },
        // Spec: MR-6.1.3 (at least 4 paths, up to 8). 8: a receiver that spreads
        // packets over CPUs by flow hash spreads one connection only as evenly as
        // its paths hash (rdma_metaroce.4).
        num_paths: u32 {
            default: 8,
            description: "Paths (UDP source ports) each connection sprays over, 1..8",
        },
        cc_target_delay_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.cc_target_delay_us,
            description: "Queueing delay (us) above the path's minimum RTT that congestion control reads as congestion, 1..10000000",
        },
        reply_wait_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.reply_wait_us,
            description: "How long (us) an RC acknowledgement may wait for a reply to carry it while the QP is itself sending (spec MR-5.4.6), 0..ack_delay_us; 0 acknowledges every message at once",
        },
        // Spec: MR-5.4.1, MR-5.5, MR-8.6.1 — the protocol's configurable timers
        // and congestion control, which verbs has no attribute for (defaults and
        // why: engine::ConnTuning::DEFAULT).
        ack_delay_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.ack_delay_us,
            description: "Longest wait (us) of a delayed RC acknowledgement (spec MR-5.4.1), 1..1000000",
        },
        ack_every: u32 {
            default: crate::engine::ConnTuning::DEFAULT.ack_every as u32,
            description: "Packets of a path after which an RC acknowledgement goes at once (spec MR-5.4.1), 1..255",
        },
        initial_rtt_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.initial_rtt_us,
            description: "RTT (us) a path is taken to have before its first sample (spec MR-5.5.1), 1..10000000",
        },
        min_path_rto_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.min_path_rto_us,
            description: "Floor (us) of a path's retransmission timeout (spec MR-5.5.2), 1..60000000",
        },
        min_rto_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.min_rto_us,
            description: "Floor (us) of a connection's retransmission timeout (spec MR-5.5.3), 1..60000000",
        },
        max_rto_us: u32 {
            default: crate::engine::ConnTuning::DEFAULT.max_rto_us,
            description: "Ceiling (us) of both retransmission timeouts after backoff, min_rto_us and min_path_rto_us..600000000",
        },
        init_window: u32 {
            default: crate::engine::ConnTuning::DEFAULT.init_window,
            description: "A connection's initial congestion window (bytes), split over its paths (spec MR-8.6.1), 1024..268435456",
        },
        max_window: u32 {
            default: crate::engine::ConnTuning::DEFAULT.max_window,
            description: "Largest congestion window (bytes) of one path (spec MR-8.6.1), 1024..268435456",
        },
        ecn_gain_shift: u32 {
            default: crate::engine::ConnTuning::DEFAULT.ecn_gain_shift as u32,
            description: "ECN marked-fraction gain g = 2^-shift (spec MR-8.3.1), 0..16",
        },
        zero_copy_tx: u32 {
            default: 1,
            description: "1: RC payloads of 2 KiB or more from user memory leave as references to its pages (no copy on transmit); 0: copied into every packet",
        },
        steer_bytes: u32 {
            default: 4096,
            description: "Received packets with at least this many payload bytes are copied on another CPU than the one they arrive on, and ACKs are handled on the CPU of their QP's doorbell (spec MR-10.3.5); 0 handles every packet where it arrives",
        },
        unlocked_copy_bytes: u32 {
            default: 2048,
            description: "Pieces of received RC payload of at least this many bytes are copied into pinned user memory after the QP's lock is released, so that two CPUs place one QP's packets at once; delivery and completions wait for the copies (spec MR-10.1.3); 0 copies everything under the lock",
        },
        rc_mtu: u32 {
            default: 0,
            description: "Payload bytes per packet of RC connections: 0 uses the QP's path_mtu; 256..65000 uses up to that many where the netdev's MTU leaves room (every host of the fabric must carry such frames)",
        },
    },
}

/// RoCEv2's UDP port; MetaRoCE must never use it (rxe and MetaRoCE run side by side).
const ROCEV2_UDP_PORT: u16 = 4791;

/// The connections' timers and congestion control, as the module parameters set
/// them (checked at load; a value beyond `u8` becomes one the check refuses).
pub(crate) fn conn_tuning() -> crate::engine::ConnTuning {
    use module_parameters as p;
    crate::engine::ConnTuning {
        initial_rtt_us: *p::initial_rtt_us.value(),
        min_path_rto_us: *p::min_path_rto_us.value(),
        min_rto_us: *p::min_rto_us.value(),
        max_rto_us: *p::max_rto_us.value(),
        ack_delay_us: *p::ack_delay_us.value(),
        ack_every: u8::try_from(*p::ack_every.value()).unwrap_or(0),
        reply_wait_us: *p::reply_wait_us.value(),
        init_window: *p::init_window.value(),
        max_window: *p::max_window.value(),
        cc_target_delay_us: *p::cc_target_delay_us.value(),
        ecn_gain_shift: u8::try_from(*p::ecn_gain_shift.value()).unwrap_or(u8::MAX),
    }
}

/// Largest number of paths a connection may use.
const MAX_PATHS: u32 = 8;

struct MetaRoce {
    /// `Some` until drop; dropped first so no new device can appear during teardown.
    link: Option<ffi::LinkOps>,
    _netdev_events: Pin<KBox<ffi::NetdevNotifier>>,
    /// Every device hangs under it.
    _parent: ffi::ParentDevice,
    /// QP work runs on it until the last device is gone.
    _wq: ffi::Workqueue,
    /// Dropped last: the CPUs' staging buffers, which every QP run builds packets in.
    _staging: ffi::Staging,
}

impl kernel::Module for MetaRoce {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let port = *module_parameters::udp_port.value();
        let paths = *module_parameters::num_paths.value();
        if port == 0 || port == ROCEV2_UDP_PORT {
            pr_err!("udp_port={} is not allowed (0 and {} are reserved)\n", port, ROCEV2_UDP_PORT);
            return Err(EINVAL);
        }
        if let Err(why) = conn_tuning().check() {
            pr_err!("module parameter out of range: {}\n", why);
            return Err(EINVAL);
        }
        let rc_mtu = *module_parameters::rc_mtu.value();
        if rc_mtu != 0 && !(crate::device::MIN_RC_MTU..=crate::device::MAX_RC_MTU).contains(&rc_mtu) {
            pr_err!(
                "rc_mtu={} is out of range (0, or {}..{})\n",
                rc_mtu,
                crate::device::MIN_RC_MTU,
                crate::device::MAX_RC_MTU
            );
            return Err(EINVAL);
        }
        if *module_parameters::zero_copy_tx.value() > 1 {
            pr_err!("zero_copy_tx={} is out of range 0..1\n", *module_parameters::zero_copy_tx.value());
            return Err(EINVAL);
        }
        if paths == 0 || paths > MAX_PATHS {
            pr_err!("num_paths={} is out of range 1..{}\n", paths, MAX_PATHS);
            return Err(EINVAL);
        }
        ffi::registry_init();
        let staging = ffi::Staging::new(crate::engine::staging_len(rc_mtu))?;
        let wq = ffi::Workqueue::new()?;
        let parent = ffi::ParentDevice::register()?;
        let notifier = KBox::pin_init(ffi::NetdevNotifier::register(), GFP_KERNEL)?;
        let link = ffi::LinkOps::register();
        pr_info!("loaded: UDP port {}, {} paths per connection\n", port, paths);
        Ok(MetaRoce {
            link: Some(link),
            _netdev_events: notifier,
            _parent: parent,
            _wq: wq,
            _staging: staging,
        })
    }
}

impl Drop for MetaRoce {
    fn drop(&mut self) {
        // Order matters: stop accepting links, then tear down every device (waiting for
        // each), and only then stop listening to netdev events (field drop).
        drop(self.link.take());
        ffi::unregister_all();
        pr_info!("unloaded\n");
    }
}
