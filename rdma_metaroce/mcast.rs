// SPDX-License-Identifier: GPL-2.0

//! Multicast groups of a device (verbs `attach_mcast`/`detach_mcast`, spec
//! MR-3.6.3): which UD QPs get a copy of a datagram sent to a group's address.
//! Safe code; the receive callback asks [`Groups::members`] and hands each QP its
//! copy. Joining the group at the IP level (IGMP/MLD), so that the netdev takes
//! the group's datagrams at all, is the consumer's part: rdma_cm does it when it
//! joins.

use kernel::prelude::*;

/// Groups a device can have (`max_mcast_grp`).
pub(crate) const MAX_GROUPS: usize = 64;
/// QPs attached to one group at most (`max_mcast_qp_attach`).
pub(crate) const MAX_GROUP_QPS: usize = 16;

/// A group's GID, with the QPs attached to it.
#[derive(Clone, Copy)]
struct Group {
    gid: [u8; 16],
    qpns: [u32; MAX_GROUP_QPS],
    n: usize,
}

impl Group {
    fn qpns(&self) -> &[u32] {
        &self.qpns[..self.n]
    }
}

/// Whether `gid` is a multicast address: IPv4-mapped 224.0.0.0/4 or IPv6 ff00::/8.
pub(crate) fn is_multicast(gid: &[u8; 16]) -> bool {
    match crate::engine::ipv4_of(gid) {
        Some(v4) => v4[0] & 0xf0 == 0xe0,
        None => gid[0] == 0xff,
    }
}

/// The multicast groups of one device.
///
/// # Invariants
///
/// `groups` has [`MAX_GROUPS`] slots, allocated at creation: attaching never
/// allocates, and a `Some` slot has at least one QP attached.
#[pin_data]
pub(crate) struct Groups {
    /// Taken by attach and detach (process context) and by the receive path
    /// (softirq), hence softirq-excluding; nothing allocates or sleeps under it.
    #[pin]
    groups: crate::ffi::SpinLockBh<KVec<Option<Group>>>,
}

impl Groups {
    pub(crate) fn new() -> Result<impl PinInit<Self, Error>> {
        let groups = KVec::from_elem(None, MAX_GROUPS, GFP_KERNEL)?;
        Ok(try_pin_init!(Self {
            groups <- crate::ffi::new_spinlock_bh!(groups, "metaroce_mcast"),
        }? Error))
    }

    /// Attaches QP `qpn` to the group `gid` (once; attaching again is a no-op).
    /// `EINVAL` for a GID that is not a multicast address, `ENOMEM` when the
    /// device has no room for another group or the group for another QP.
    pub(crate) fn attach(&self, gid: [u8; 16], qpn: u32) -> Result {
        if !is_multicast(&gid) {
            return Err(EINVAL);
        }
        let mut groups = self.groups.lock();
        if let Some(g) = groups.iter_mut().flatten().find(|g| g.gid == gid) {
            if g.qpns().contains(&qpn) {
                return Ok(());
            }
            let slot = g.qpns.get_mut(g.n).ok_or(ENOMEM)?;
            *slot = qpn;
            g.n += 1;
            return Ok(());
        }
        let free = groups.iter_mut().find(|g| g.is_none()).ok_or(ENOMEM)?;
        let mut qpns = [0; MAX_GROUP_QPS];
        qpns[0] = qpn;
        *free = Some(Group { gid, qpns, n: 1 });
        Ok(())
    }

    /// Detaches QP `qpn` from the group `gid`; the group goes with its last QP.
    /// `EINVAL` if the QP is not attached to it.
    pub(crate) fn detach(&self, gid: [u8; 16], qpn: u32) -> Result {
        let mut groups = self.groups.lock();
        let slot = groups.iter_mut().find(|g| g.as_ref().is_some_and(|g| g.gid == gid)).ok_or(EINVAL)?;
        let g = slot.as_mut().ok_or(EINVAL)?;
        let i = g.qpns().iter().position(|q| *q == qpn).ok_or(EINVAL)?;
        g.qpns.copy_within(i + 1..g.n, i);
        g.n -= 1;
        if g.n == 0 {
            *slot = None;
        }
        Ok(())
    }

    /// Copies the QPs attached to `gid` into `out` and returns how many there are.
    pub(crate) fn members(&self, gid: &[u8; 16], out: &mut [u32; MAX_GROUP_QPS]) -> usize {
        let groups = self.groups.lock();
        let Some(g) = groups.iter().flatten().find(|g| g.gid == *gid) else { return 0 };
        out[..g.n].copy_from_slice(g.qpns());
        g.n
    }
}

#[kunit_tests(rdma_metaroce_mcast)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> [u8; 16] {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d]
    }

    #[test]
    fn groups_take_multicast_gids_and_keep_their_members() -> Result {
        let g = KBox::pin_init(Groups::new()?, GFP_KERNEL)?;
        let group = v4(239, 255, 0, 1);
        let mut out = [0; MAX_GROUP_QPS];
        assert_eq!(g.attach(v4(198, 18, 0, 1), 5), Err(EINVAL));
        assert!(is_multicast(&[0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]));
        g.attach(group, 5)?;
        g.attach(group, 6)?;
        g.attach(group, 5)?;
        assert_eq!(g.members(&group, &mut out), 2);
        assert_eq!(&out[..2], &[5, 6]);
        assert_eq!(g.members(&v4(239, 255, 0, 2), &mut out), 0);
        assert_eq!(g.detach(group, 7), Err(EINVAL));
        g.detach(group, 5)?;
        assert_eq!((g.members(&group, &mut out), out[0]), (1, 6));
        g.detach(group, 6)?;
        assert_eq!(g.members(&group, &mut out), 0);
        assert_eq!(g.detach(group, 6), Err(EINVAL));
        Ok(())
    }

    #[test]
    fn groups_and_members_are_bounded() -> Result {
        let g = KBox::pin_init(Groups::new()?, GFP_KERNEL)?;
        let group = v4(239, 1, 1, 1);
        for q in 0..MAX_GROUP_QPS as u32 {
            g.attach(group, 100 + q)?;
        }
        assert_eq!(g.attach(group, 99), Err(ENOMEM));
        for i in 1..MAX_GROUPS as u8 {
            g.attach(v4(239, 2, 0, i), 1)?;
        }
        assert_eq!(g.attach(v4(239, 3, 0, 0), 1), Err(ENOMEM));
        g.detach(v4(239, 2, 0, 1), 1)?;
        g.attach(v4(239, 3, 0, 0), 1)?;
        Ok(())
    }
}
