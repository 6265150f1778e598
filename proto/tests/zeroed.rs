//! The all-zero bit pattern is a valid `Connection` (spec MR-10.2.2), so a
//! kernel driver can allocate zeroed heap memory and call `reset` in place,
//! never building the 26 KiB value on its (small) stack.

use metaroce_proto::{Config, Connection, QpState};

#[test]
fn zeroed_connection_is_valid_and_resets_in_place() {
    // SAFETY: every field of `Connection` is an integer, a bool, an array of
    // those, or a `#[repr(u8)]` fieldless enum with a variant of value 0;
    // `Option`s are not stored (see `Maybe` and `Cqe` in connection.rs).
    let mut a: Box<Connection> = unsafe { Box::<Connection>::new_zeroed().assume_init() };
    let mut b: Box<Connection> = unsafe { Box::<Connection>::new_zeroed().assume_init() };
    assert_eq!(a.state(), QpState::Rts);
    assert!(a.poll_completion().is_none());
    a.reset(Config::test_pair(1, 2));
    b.reset(Config::test_pair(2, 1));
    assert_eq!(metaroce_proto::selftest::loopback(&mut a, &mut b), Ok(()));
}
