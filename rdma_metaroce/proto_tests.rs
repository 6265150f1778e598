// SPDX-License-Identifier: GPL-2.0

//! KUnit checks that the protocol core compiled into the module (from `proto/src`, the
//! same files cargo tests on the host) behaves the same in the kernel: byte-exact
//! header encoding, rejection of malformed bytes, and SACK bitmap arithmetic.

use kernel::prelude::*;

#[kunit_tests(rdma_metaroce_proto)]
mod tests {
    use crate::proto::sack::Bits256;
    use crate::proto::wire::{BaseHeader, BaseRepr, Flags, Opcode, PacketRepr};

    /// Spec chapter 3: the 20-byte base header of a WRITE with LAST|ACK_REQ on path 3.
    const BASE: [u8; 20] = [
        0x10, 0x04, 0x88, 0x03, 0x00, 0x12, 0x34, 0x56, 0x01, 0x02, 0x03, 0x04, 0xa0, 0xb0,
        0xc0, 0xd0, 0xde, 0xad, 0xbe, 0xef,
    ];

    fn base() -> BaseRepr {
        BaseRepr {
            opcode: Opcode::Write,
            flags: Flags(Flags::LAST | Flags::ACK_REQ),
            path_id: 3,
            dest_qpn: 0x123456,
            path_psn: 0x01020304,
            tsn: 0xa0b0c0d0,
            timestamp: 0xdeadbeef,
        }
    }

    #[test]
    fn base_header_is_byte_exact_in_kernel() {
        let mut buf = [0u8; 20];
        assert!(base().emit(&mut BaseHeader::new_unchecked(&mut buf[..])).is_ok());
        assert_eq!(buf, BASE);
        let view = BaseHeader::new_checked(&BASE[..]);
        assert!(view.is_ok());
        if let Ok(v) = view {
            assert_eq!(v.version(), 1);
            assert_eq!(v.dest_qpn(), 0x123456);
            assert_eq!(BaseRepr::parse(&v), Ok(base()));
        }
    }

    #[test]
    fn malformed_packets_are_rejected_not_panicking() {
        assert!(PacketRepr::parse(&[]).is_err());
        assert!(PacketRepr::parse(&BASE[..7]).is_err());
        let mut bad_version = BASE;
        bad_version[0] = 0xf0;
        assert!(PacketRepr::parse(&bad_version).is_err());
        // Every truncation of a valid header fails cleanly.
        for n in 0..BASE.len() {
            assert!(PacketRepr::parse(&BASE[..n]).is_err());
        }
    }

    /// Two whole connections (zero-allocated on the heap, reset in place) run the
    /// core's loopback exchange — sends, writes, reads and atomics — in the kernel.
    #[test]
    fn two_connections_complete_the_loopback_exchange() -> kernel::error::Result {
        let mut a = crate::ffi::new_zeroed::<crate::proto::Connection>()?;
        let mut b = crate::ffi::new_zeroed::<crate::proto::Connection>()?;
        assert_eq!(crate::proto::selftest::loopback(&mut a, &mut b), Ok(()));
        Ok(())
    }

    #[test]
    fn sack_bitmap_tracks_holes() {
        let mut b = Bits256::default();
        b.set(0);
        b.set(200);
        assert!(b.get(0) && b.get(200) && !b.get(1));
        let shifted = b.rotate_down(1);
        assert!(shifted.get(199) && !shifted.get(200));
        b.clear(0);
        b.clear(200);
        assert!(b.is_empty());
    }
}
