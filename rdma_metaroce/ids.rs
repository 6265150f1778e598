// SPDX-License-Identifier: GPL-2.0

//! Identifier tables: QP numbers and memory keys. Each device owns fixed-size
//! tables (allocated with the device, so no allocation happens later), and mixes a
//! random per-device salt into every identifier so that they are not predictable
//! (spec: security considerations) while lookup stays a table index.
//!
//! Slots are handed out in turn, not lowest first (spec MR-7.5.1 and MR-9.1.2:
//! QPNs are not reused quickly): an identifier just freed is the last to be
//! handed out again. A peer may still have packets of a QP in the
//! network, or an rkey, after the QP or region is gone; with the lowest free slot
//! first, the next QP or region (one test run after another) got the very same
//! number and would be the one those packets or that key reached (as a late ACK
//! did, spec MR-5.2.3). In turn, that takes as many creations as there are slots.

use kernel::new_spinlock;
use kernel::prelude::*;
use kernel::sync::SpinLock;

/// How an identifier is built from a slot index and the salt.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Layout {
    /// 24-bit QP numbers: `salt(10 bits) << 14 | slot(14 bits)`.
    Qpn,
    /// 32-bit memory keys (`lkey`/`rkey`): `slot(24 bits) << 8 | salt(8 bits)`.
    Key,
}

/// A table of `slots` identifiers; the first `reserved` slots are never handed out.
#[pin_data]
pub(crate) struct IdTable {
    layout: Layout,
    salt: u32,
    reserved: u32,
    /// Slot occupancy (fixed size) and the slot to look at first.
    #[pin]
    slots: SpinLock<Slots>,
}

/// What [`IdTable::slots`] guards.
struct Slots {
    used: KVec<bool>,
    /// Where the next search for a free slot starts: after the last one handed out.
    next: usize,
}

impl IdTable {
    pub(crate) fn new(layout: Layout, slots: u32, reserved: u32, random: u32) -> Result<impl PinInit<Self, Error>> {
        let limit = match layout {
            Layout::Qpn => 1 << 14,
            Layout::Key => 1 << 24,
        };
        if slots == 0 || slots > limit || reserved >= slots {
            return Err(EINVAL);
        }
        let mut used = KVec::with_capacity(slots as usize, GFP_KERNEL)?;
        for slot in 0..slots {
            used.push(slot < reserved, GFP_KERNEL)?;
        }
        let salt = match layout {
            // Never the all-ones salt: 0xFFFFFF, its last QPN, is the multicast
            // destination (spec MR-3.6.3).
            Layout::Qpn => (random & 0x3ff).min(0x3fe),
            Layout::Key => random & 0xff,
        };
        let first = reserved as usize;
        Ok(try_pin_init!(Self {
            layout,
            salt,
            reserved,
            slots <- new_spinlock!(Slots { used, next: first }, "metaroce_ids"),
        }? Error))
    }

    fn compose(&self, slot: u32) -> u32 {
        match self.layout {
            Layout::Qpn => self.salt << 14 | slot,
            Layout::Key => slot << 8 | self.salt,
        }
    }

    /// The slot an identifier names, if it was built by this table.
    pub(crate) fn slot_of(&self, id: u32) -> Option<usize> {
        match self.layout {
            Layout::Qpn => (id >> 14 == self.salt).then_some((id & 0x3fff) as usize),
            // The low byte of a memory key starts as the salt but belongs to the
            // consumer afterwards: a fast-registration MR is re-registered under a
            // new low byte (`ib_update_fast_reg_key`). Lookups compare the full key
            // with the registration's.
            Layout::Key => Some((id >> 8) as usize),
        }
    }

    /// A free identifier, or `ENOMEM` when the table is full.
    pub(crate) fn alloc(&self) -> Result<u32> {
        let mut guard = self.slots.lock();
        let s = &mut *guard;
        let (before, after) = s.used.split_at(s.next.min(s.used.len()));
        let slot = match after.iter().position(|u| !*u) {
            Some(i) => s.next + i,
            None => before.iter().position(|u| !*u).ok_or(ENOMEM)?,
        };
        s.used[slot] = true;
        // The next search starts after it (and wraps to 0: reserved slots are
        // never free, so they are passed over).
        s.next = slot + 1;
        Ok(self.compose(slot as u32))
    }

    /// Returns an identifier to the table (reserved or foreign ones are ignored).
    pub(crate) fn free(&self, id: u32) {
        let Some(slot) = self.slot_of(id) else { return };
        if slot < self.reserved as usize {
            return;
        }
        if let Some(u) = self.slots.lock().used.get_mut(slot) {
            *u = false;
        }
    }
}

#[kunit_tests(rdma_metaroce_ids)]
mod tests {
    use super::*;

    #[test]
    fn qp_numbers_are_unique_salted_and_skip_reserved() -> Result {
        let t = KBox::pin_init(IdTable::new(Layout::Qpn, 1 << 14, 2, 0x2a5)?, GFP_KERNEL)?;
        let a = t.alloc()?;
        let b = t.alloc()?;
        assert_ne!(a, b);
        assert_eq!(a >> 14, 0x2a5);
        assert_eq!(t.slot_of(a), Some(2));
        // A freed number comes back only after every other slot was handed out.
        t.free(a);
        let c = t.alloc()?;
        assert_ne!(c, a);
        assert_eq!(t.slot_of(c), Some(4));
        // The last QPN of the all-ones salt would be the multicast QPN 0xFFFFFF.
        let t = KBox::pin_init(IdTable::new(Layout::Qpn, 1 << 14, 2, 0x3ff)?, GFP_KERNEL)?;
        assert_eq!(t.alloc()? >> 14, 0x3fe);
        Ok(())
    }

    #[test]
    fn identifiers_are_handed_out_in_turn_and_wrap_past_the_reserved() -> Result {
        let t = KBox::pin_init(IdTable::new(Layout::Qpn, 5, 2, 0x11)?, GFP_KERNEL)?;
        let ids = [t.alloc()?, t.alloc()?, t.alloc()?];
        let slots = ids.map(|id| t.slot_of(id));
        assert_eq!(slots, [Some(2), Some(3), Some(4)]);
        assert_eq!(t.alloc(), Err(ENOMEM));
        // Freed in the middle, then at the end: the search wraps past the
        // reserved slots to the middle one first.
        t.free(ids[1]);
        t.free(ids[2]);
        assert_eq!(t.slot_of(t.alloc()?), Some(3));
        assert_eq!(t.slot_of(t.alloc()?), Some(4));
        assert_eq!(t.alloc(), Err(ENOMEM));
        // Reserved and foreign identifiers are not freed.
        t.free(t.compose(0));
        t.free(0x3f << 14 | 2);
        assert_eq!(t.alloc(), Err(ENOMEM));
        Ok(())
    }

    #[test]
    fn keys_carry_the_salt_in_the_low_byte_and_exhaust_cleanly() -> Result {
        let t = KBox::pin_init(IdTable::new(Layout::Key, 3, 1, 0x1c5)?, GFP_KERNEL)?;
        let a = t.alloc()?;
        assert_eq!(a & 0xff, 0xc5);
        assert_eq!(a >> 8, 1);
        let _b = t.alloc()?;
        assert_eq!(t.alloc(), Err(ENOMEM));
        // Any low byte names the same slot (fast-registration keys change it).
        assert_eq!(t.slot_of(a ^ 1), Some(1));
        assert!(IdTable::new(Layout::Qpn, 1 << 15, 0, 0).is_err());
        Ok(())
    }
}
