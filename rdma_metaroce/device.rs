// SPDX-License-Identifier: GPL-2.0

//! Device lifecycle policy: which `rdma link add` requests are accepted, what a
//! MetaRoCE device reports to ib_core (`query_device`, `query_port`), and how it
//! follows its network device. Safe code only; the mechanics live in [`crate::ffi`].

use crate::ffi::{self, DeviceCaps, IbDev, IbMtu, NetDev, NetdevEvent, PortInfo};
use crate::ids::{IdTable, Layout};
use core::ffi::CStr;
use kernel::prelude::*;

/// Bytes every MetaRoCE datagram spends on headers below the RDMA payload, in the worst
/// case (IPv6 40 + UDP 8 + MetaRoCE data header and extensions, rounded up to 64).
/// The active MTU advertised to verbs is the largest IB MTU that fits after it.
pub(crate) const ENCAP_OVERHEAD: u32 = 40 + 8 + 64;

/// Number of GID table entries per port: room for several IPv4 and IPv6 addresses,
/// each as RoCE v1 and v2 entries, filled by ib_core from the netdev's addresses.
const GID_TABLE_LEN: u32 = 128;

/// Memory regions per device (`max_mr`).
pub(crate) const MAX_MR: u32 = 65536;

/// Per-device driver state, stored inside ib_core's device allocation.
pub(crate) struct DeviceData {
    /// EUI-64 derived from the netdev's MAC, big-endian; also the system image GUID.
    node_guid_be: u64,
    /// Name of the netdev at creation, for log messages after the device is gone
    /// from ib_core's view (its own name is cleared by then).
    netdev_name: [u8; 16],
    /// QP numbers of this device.
    pub(crate) qpns: Pin<KBox<IdTable>>,
    /// Memory keys (lkey/rkey) of this device.
    pub(crate) mr_keys: Pin<KBox<IdTable>>,
    /// Registered memory regions by key (the data path's view of `mr_keys`).
    pub(crate) mrs: Pin<KBox<crate::mr::MrTable>>,
    /// Live QPs by number, for received datagrams.
    pub(crate) qp_table: ffi::QpTable,
    /// Multicast groups and the UD QPs attached to them.
    pub(crate) mcast: Pin<KBox<crate::mcast::Groups>>,
    /// Packet counters (`rdma statistic`).
    pub(crate) counters: crate::net::Counters,
}

/// EUI-64 from a MAC address (RFC 4291 appendix A: flip the U/L bit, insert FF:FE).
pub(crate) fn eui64_from_mac(mac: [u8; 6]) -> [u8; 8] {
    [mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}

/// The largest IB MTU whose payload plus [`ENCAP_OVERHEAD`] fits in `netdev_mtu`.
pub(crate) fn ib_mtu_for(netdev_mtu: u32) -> IbMtu {
    let room = netdev_mtu.saturating_sub(ENCAP_OVERHEAD);
    match room {
        4096.. => IbMtu::M4096,
        2048.. => IbMtu::M2048,
        1024.. => IbMtu::M1024,
        512.. => IbMtu::M512,
        _ => IbMtu::M256,
    }
}

/// Smallest and largest `rc_mtu` module parameter (MetaRoCE MTU range, spec MR-2.6.1).
pub(crate) const MIN_RC_MTU: u32 = crate::proto::wire::MIN_MTU as u32;
pub(crate) const MAX_RC_MTU: u32 = crate::proto::wire::MAX_MTU as u32;

/// The MetaRoCE MTU an RC connection may use beyond its verbs `path_mtu` (0: none):
/// the `rc_mtu` module parameter, cut to what [`ENCAP_OVERHEAD`] leaves of the
/// netdev's MTU. Verbs' `path_mtu` stops at 4096, but a reliable connection's
/// packetization is the transport's own business (spec MR-2.6.1 allows up to 65000),
/// and on a jumbo-frame fabric (or a virtual link with a 64 KiB MTU) more payload per
/// packet divides the per-packet work.
pub(crate) fn rc_mtu_for(param: u32, netdev_mtu: u32) -> u32 {
    if param == 0 {
        return 0;
    }
    param.min(netdev_mtu.saturating_sub(ENCAP_OVERHEAD))
}

/// `rdma link add NAME type metaroce netdev DEV`.
pub(crate) fn newlink(name: &CStr, ndev: &NetDev) -> Result {
    if !ndev.is_ethernet() {
        pr_err!(
            "cannot add {:?}: {:?} is not an Ethernet device\n",
            name,
            ndev.name()
        );
        return Err(EINVAL);
    }
    let mac = ndev.hw_addr().ok_or_else(|| {
        pr_err!("cannot add {:?}: {:?} has no hardware address\n", name, ndev.name());
        EINVAL
    })?;
    let guid = u64::from_ne_bytes(eui64_from_mac(mac));
    let mut netdev_name = [0u8; 16];
    for (d, s) in netdev_name.iter_mut().zip(ndev.name().to_bytes().iter().take(15)) {
        *d = *s;
    }
    // QPN slots 0 and 1 are the special QPs; key slot 0 is the local DMA lkey's.
    let qpns = KBox::pin_init(IdTable::new(Layout::Qpn, crate::qp::MAX_QP, 2, ffi::random_u32(), ffi::random_u32())?, GFP_KERNEL)?;
    let mr_keys = KBox::pin_init(IdTable::new(Layout::Key, MAX_MR, 1, ffi::random_u32(), ffi::random_u32())?, GFP_KERNEL)?;
    let data = DeviceData {
        node_guid_be: guid,
        netdev_name,
        qpns,
        mr_keys,
        mrs: KBox::pin_init(crate::mr::MrTable::new(MAX_MR as usize)?, GFP_KERNEL)?,
        qp_table: ffi::QpTable::new(crate::qp::MAX_QP as usize)?,
        mcast: KBox::pin_init(crate::mcast::Groups::new()?, GFP_KERNEL)?,
        counters: crate::net::Counters::new(),
    };
    let port = *crate::module_parameters::udp_port.value();
    match IbDev::create(name, ndev, data, guid, port) {
        Ok(()) => {
            pr_info!("added {:?} on {:?}\n", name, ndev.name());
            Ok(())
        }
        Err(e) if e == EEXIST => {
            pr_err!("cannot add {:?}: {:?} already has a MetaRoCE device\n", name, ndev.name());
            Err(e)
        }
        Err(e) => {
            pr_err!("cannot add {:?} on {:?}: error {}\n", name, ndev.name(), e.to_errno());
            Err(e)
        }
    }
}

/// `rdma link del NAME`: ib_core unregisters the device right after this returns.
pub(crate) fn dellink(dev: &IbDev) -> Result {
    pr_info!("deleting {:?}\n", dev.name());
    Ok(())
}

/// The device is being freed (after unregistration); last call for `dev`.
pub(crate) fn on_dealloc(dev: &IbDev) {
    let name = &dev.data().netdev_name;
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let name = core::str::from_utf8(&name[..len]).unwrap_or("?");
    pr_info!("removed the device on {}\n", name);
}

/// Netdev events: a device whose netdev disappears is unregistered with it. Port
/// up/down is followed by ib_core itself (`ib_dispatch_port_state_event`), and
/// [`port_info`] reads the MTU live.
pub(crate) fn netdev_event(ndev: &NetDev, event: NetdevEvent) {
    if event == NetdevEvent::Unregister {
        let n = ffi::unregister_on_netdev(ndev);
        if n > 0 {
            pr_info!("{:?} is going away: unregistering its MetaRoCE device\n", ndev.name());
        }
    }
}

/// What `query_device` reports. The limits are those the data path enforces.
pub(crate) fn device_caps(dev: &IbDev) -> DeviceCaps {
    DeviceCaps {
        vendor_id: 0xffffff,
        vendor_part_id: 0x4d52, // "MR"
        hw_ver: 1,
        fw_ver: 1,
        sys_image_guid_be: dev.data().node_guid_be,
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        max_qp: crate::qp::MAX_QP - 2,
        max_qp_wr: crate::qp::MAX_QP_WR,
        max_sge: crate::qp::MAX_SGE,
        max_sge_rd: crate::qp::MAX_SGE,
        max_cq: 16384,
        max_cqe: crate::cq::MAX_CQE,
        max_mr: MAX_MR - 1,
        max_pd: 65536,
        max_qp_rd_atom: crate::qp::MAX_RD_ATOMIC as u32,
        max_ah: 65536,
        max_srq: crate::srq::MAX_SRQ,
        max_srq_wr: crate::qp::MAX_QP_WR,
        max_srq_sge: crate::qp::MAX_SGE,
        atomics: true,
    }
}

/// What `query_port` reports: state and MTU follow the netdev.
pub(crate) fn port_info(dev: &IbDev) -> PortInfo {
    let (state, mtu) = dev
        .with_netdev(|n| (n.port_state(), n.mtu()))
        .unwrap_or((ffi::PortState::Down, 0));
    PortInfo {
        state,
        max_mtu: IbMtu::M4096,
        active_mtu: ib_mtu_for(mtu),
        gid_tbl_len: GID_TABLE_LEN,
        max_msg_sz: 1 << 31,
    }
}

#[kunit_tests(rdma_metaroce_device)]
mod tests {
    use super::*;

    #[test]
    fn eui64_flips_universal_local_bit_and_inserts_fffe() {
        let eui = eui64_from_mac([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(eui, [0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]);
    }

    #[test]
    fn rc_mtu_is_the_parameter_cut_to_the_netdev() {
        assert_eq!(rc_mtu_for(0, 9000), 0);
        assert_eq!(rc_mtu_for(9000, 9000), 9000 - ENCAP_OVERHEAD);
        assert_eq!(rc_mtu_for(4096, 9000), 4096);
        assert_eq!(rc_mtu_for(9000, 1500), 1500 - ENCAP_OVERHEAD);
        assert_eq!(rc_mtu_for(9000, 0), 0);
    }

    #[test]
    fn active_mtu_leaves_room_for_encapsulation() {
        assert_eq!(ib_mtu_for(1500), IbMtu::M1024);
        assert_eq!(ib_mtu_for(9000), IbMtu::M4096);
        assert_eq!(ib_mtu_for(2048 + ENCAP_OVERHEAD), IbMtu::M2048);
        assert_eq!(ib_mtu_for(2048 + ENCAP_OVERHEAD - 1), IbMtu::M1024);
        assert_eq!(ib_mtu_for(0), IbMtu::M256);
    }
}
