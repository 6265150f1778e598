// SPDX-License-Identifier: GPL-2.0

//! Identifier tables: QP numbers and memory keys. Each device owns fixed-size
//! tables (allocated with the device, so no allocation happens later), and mixes a
//! random per-device salt into every identifier so that they are not predictable
//! (spec: security considerations) while lookup stays a table index.
//!
//! Slots are handed out in turn along a keyed order of all of them (spec
//! MR-7.5.1 and MR-9.1.2: QPNs are not reused quickly, nor allocated
//! predictably): an identifier just freed is the last to be handed out again.
//! A peer may still have packets of a QP in the network, or an rkey, after the
//! QP or region is gone; with the lowest free slot first, the next QP or region
//! (one test run after another) got the very same number and would be the one
//! those packets or that key reached (as a late ACK did, spec MR-5.2.3). In
//! turn, that takes as many creations as there are slots. The order is a
//! permutation drawn per device, so that an off-path sender cannot guess the
//! numbers in use from the salt and a count (MR-9.1.3).

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
    /// The order the slots are handed out in.
    order: SlotOrder,
    /// Slot occupancy (fixed size) and the slot to look at first.
    #[pin]
    slots: SpinLock<Slots>,
}

/// What [`IdTable::slots`] guards.
struct Slots {
    used: KVec<bool>,
    /// The position in [`IdTable::order`] where the next search for a free slot
    /// starts: after the last one handed out.
    next: u32,
}

/// A keyed permutation of the slots `0..n`: a four-round Feistel network over
/// the two halves of `2 * half` bits, the smallest such domain that holds `n`,
/// with values of `n` or more walked on through the network until they fall
/// below `n` (which keeps it a permutation of `0..n`).
struct SlotOrder {
    n: u32,
    half: u32,
    keys: [u32; 4],
}

impl SlotOrder {
    fn new(n: u32, key: u32) -> Self {
        let mut half = 1;
        while (1u64 << (2 * half)) < u64::from(n) {
            half += 1;
        }
        let mut keys = [0; 4];
        for (i, k) in (0u32..).zip(keys.iter_mut()) {
            *k = mix32(key ^ i.wrapping_mul(0x9e37_79b9));
        }
        SlotOrder { n, half, keys }
    }

    /// One pass through the network (a permutation of `0..4^half`).
    fn permute(&self, x: u32) -> u32 {
        let mask = (1 << self.half) - 1;
        let (mut l, mut r) = (x >> self.half, x & mask);
        for &k in &self.keys {
            (l, r) = (r, l ^ (mix32(r ^ k) & mask));
        }
        l << self.half | r
    }

    /// The slot at position `pos` (below `n`) of the order.
    fn slot(&self, pos: u32) -> u32 {
        let mut s = self.permute(pos);
        // Ends: `pos` is below `n` and on the permutation's cycle through `s`.
        while s >= self.n {
            s = self.permute(s);
        }
        s
    }
}

/// A 32-bit mixing function (a multiply-xorshift finaliser).
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

impl IdTable {
    /// `random` draws the salt, `order_key` the order of the slots.
    pub(crate) fn new(
        layout: Layout,
        slots: u32,
        reserved: u32,
        random: u32,
        order_key: u32,
    ) -> Result<impl PinInit<Self, Error>> {
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
        Ok(try_pin_init!(Self {
            layout,
            salt,
            reserved,
            order: SlotOrder::new(slots, order_key),
            slots <- new_spinlock!(Slots { used, next: 0 }, "metaroce_ids"),
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
        let n = self.order.n;
        // Reserved slots are never free, so they are passed over.
        for step in 0..n {
            let pos = (s.next + step) % n;
            let slot = self.order.slot(pos);
            if let Some(u) = s.used.get_mut(slot as usize).filter(|u| !**u) {
                *u = true;
                s.next = (pos + 1) % n;
                return Ok(self.compose(slot));
            }
        }
        Err(ENOMEM)
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
        let t = KBox::pin_init(IdTable::new(Layout::Qpn, 1 << 14, 2, 0x2a5, 0x1234_5678)?, GFP_KERNEL)?;
        let a = t.alloc()?;
        let b = t.alloc()?;
        assert_ne!(a, b);
        assert_eq!(a >> 14, 0x2a5);
        assert!(t.slot_of(a).is_some_and(|s| s >= 2));
        // A freed number does not come back soon.
        t.free(a);
        for _ in 0..1000 {
            assert_ne!(t.alloc()?, a);
        }
        // The last QPN of the all-ones salt would be the multicast QPN 0xFFFFFF.
        let t = KBox::pin_init(IdTable::new(Layout::Qpn, 1 << 14, 2, 0x3ff, 1)?, GFP_KERNEL)?;
        assert_eq!(t.alloc()? >> 14, 0x3fe);
        Ok(())
    }

    #[test]
    fn slot_orders_are_permutations_that_depend_on_the_key() -> Result {
        for n in Iterator::chain(1..=70u32, [1 << 14, (1 << 14) + 3]) {
            for key in [0, 1, 0xdead_beef] {
                let order = SlotOrder::new(n, key);
                let mut seen = KVec::with_capacity(n as usize, GFP_KERNEL)?;
                for _ in 0..n {
                    seen.push(false, GFP_KERNEL)?;
                }
                for pos in 0..n {
                    let slot = order.slot(pos) as usize;
                    assert!(slot < n as usize);
                    assert!(!seen[slot]);
                    seen[slot] = true;
                }
            }
        }
        // Not the identity, and another key gives another order.
        let (a, b) = (SlotOrder::new(1 << 14, 7), SlotOrder::new(1 << 14, 8));
        let moved = (0..64).filter(|&p| a.slot(p) != p).count();
        let differ = (0..64).filter(|&p| a.slot(p) != b.slot(p)).count();
        assert!(moved > 60 && differ > 60);
        Ok(())
    }

    #[test]
    fn identifiers_are_handed_out_in_turn_and_wrap_past_the_reserved() -> Result {
        // Five usable slots: each is handed out once before any comes back, and a
        // freed one only after the four others.
        let t = KBox::pin_init(IdTable::new(Layout::Qpn, 7, 2, 0x11, 0x5eed)?, GFP_KERNEL)?;
        let mut ids = [0; 5];
        for id in ids.iter_mut() {
            *id = t.alloc()?;
            assert!(t.slot_of(*id).is_some_and(|s| (2..7).contains(&s)));
        }
        for (i, a) in ids.iter().enumerate() {
            assert!(ids[i + 1..].iter().all(|b| b != a));
        }
        assert_eq!(t.alloc(), Err(ENOMEM));
        // With all free again, the search goes on where it stopped: the same
        // order, round after round.
        for &id in &ids {
            t.free(id);
        }
        for &id in &ids {
            assert_eq!(t.alloc()?, id);
            t.free(id);
        }
        let first = t.alloc()?;
        assert_eq!(first, ids[0]);
        for &id in &ids[1..] {
            assert_eq!(t.alloc()?, id);
        }
        // Reserved and foreign identifiers are not freed.
        t.free(t.compose(0));
        t.free(0x3f << 14 | 2);
        assert_eq!(t.alloc(), Err(ENOMEM));
        Ok(())
    }

    #[test]
    fn keys_carry_the_salt_in_the_low_byte_and_exhaust_cleanly() -> Result {
        let t = KBox::pin_init(IdTable::new(Layout::Key, 3, 1, 0x1c5, 9)?, GFP_KERNEL)?;
        let a = t.alloc()?;
        assert_eq!(a & 0xff, 0xc5);
        let slot = a >> 8;
        assert!(slot == 1 || slot == 2);
        let _b = t.alloc()?;
        assert_eq!(t.alloc(), Err(ENOMEM));
        // Any low byte names the same slot (fast-registration keys change it).
        assert_eq!(t.slot_of(a ^ 1), Some(slot as usize));
        assert!(IdTable::new(Layout::Qpn, 1 << 15, 0, 0, 0).is_err());
        Ok(())
    }
}
