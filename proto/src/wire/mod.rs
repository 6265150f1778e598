//! Typed, zero-copy views and parse/emit representations of MetaRoCE packets.
//!
//! Style follows the usual two-layer wire design: a *view*
//! (`XxxHeader<T: AsRef<[u8]>>`) wraps a byte buffer and exposes typed field
//! accessors at fixed offsets, and a *repr* (`XxxRepr`) is a plain struct that
//! is `parse`d from a checked view and `emit`ted into a mutable one.
//!
//! # Panic-free contract for untrusted bytes (Spec: MR-3.1.6)
//!
//! * Every accessor is total: it reads through `<[u8]>::get` and returns `0`
//!   (or does nothing, for setters) when the buffer is too short. No accessor,
//!   constructor, `parse` or `emit` function in this module can panic on any
//!   input, whatever its length or content.
//! * `new_checked` / `check_len` validate that the buffer holds the fixed
//!   header; only after that are accessor values meaningful.
//! * [`PacketRepr::parse`] validates version, opcode, lengths, reserved bits
//!   and the extension chain, and returns a [`WireError`] for anything it does
//!   not accept. The property test `tests/wire_props.rs` feeds arbitrary byte
//!   strings to it.
//!
//! All multi-byte fields are big-endian (network order) (MR-3.1.2).

mod ack;
mod base;
mod ext;
mod packet;
mod params;
mod payload;
mod request;

pub use self::ack::{
    rnr_timer_code, rnr_timer_ns, AckHeader, AckRepr, Syndrome, ACK_FLAG_DUP, ACK_FLAG_ECE,
    ACK_FLAG_MOVE, ACK_FLAG_PROBE, SACK_BITS, SACK_BYTES,
};
pub use self::base::{BaseHeader, BaseRepr, Flags, Opcode, MRH_VERSION};
pub use self::ext::{
    ExtIter, Extension, EXT_FLAG_CRITICAL, EXT_HEADER_LEN, EXT_MAX_TOTAL, EXT_TYPE_ACK,
    EXT_TYPE_PAD,
};
pub use self::packet::{Body, PacketRepr, Route, ACK_EXT_LEN};
pub use self::params::{
    ConnParams, ParamsBlock, MAX_MTU, MAX_RD_ATOMIC, MIN_MTU, PARAMS_FLAG_CREDIT, PARAMS_MAGIC,
};
pub use self::payload::{Payload, HEADERS_MAX};
pub use self::request::{
    AtomicHeader, AtomicRepr, RequestHeader, RequestRepr, ResponseHeader, ResponseRepr, UdHeader,
    UdRepr,
};

/// Why a packet was rejected or could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The buffer is shorter than the header(s) it must hold.
    Truncated,
    /// The version nibble is not one this implementation speaks (MR-3.2.2).
    BadVersion,
    /// Unknown or reserved opcode (MR-3.2.3).
    BadOpcode,
    /// A field value violates a MUST of chapter 3 (e.g. payload on a READ
    /// request, offset beyond the message length).
    Malformed,
    /// An extension marked critical is not understood (MR-3.7.4).
    UnknownCriticalExtension,
    /// The output buffer is too small for `emit`.
    BufferTooSmall,
}

/// Total big-endian field access on byte slices; never panics.
pub(crate) trait FieldIo: Sized {
    fn read(buf: &[u8], off: usize) -> Self;
    fn write(self, buf: &mut [u8], off: usize);
}

macro_rules! field_io {
    ($ty:ty, $n:expr) => {
        impl FieldIo for $ty {
            #[inline]
            fn read(buf: &[u8], off: usize) -> Self {
                let mut b = [0u8; $n];
                if let Some(s) = buf.get(off..off.saturating_add($n)) {
                    b.copy_from_slice(s);
                }
                <$ty>::from_be_bytes(b)
            }
            #[inline]
            fn write(self, buf: &mut [u8], off: usize) {
                if let Some(s) = buf.get_mut(off..off.saturating_add($n)) {
                    s.copy_from_slice(&self.to_be_bytes());
                }
            }
        }
    };
}
field_io!(u8, 1);
field_io!(u16, 2);
field_io!(u32, 4);
field_io!(u64, 8);

/// Declares a zero-copy header view with a fixed length and typed fields.
macro_rules! header_view {
    (
        $(#[$sdoc:meta])*
        $name:ident, $len:expr,
        { $( $(#[$fdoc:meta])* $get:ident / $set:ident : $ty:ty = $off:expr ; )* }
    ) => {
        $(#[$sdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the fixed header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length. Accessors stay
            /// panic-free but read zero past the end of a short buffer.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after [`Self::check_len`].
            pub fn new_checked(buffer: T) -> Result<Self, WireError> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole fixed header.
            pub fn check_len(&self) -> Result<(), WireError> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err(WireError::Truncated)
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// Bytes following the fixed header (empty if none).
            pub fn rest(&self) -> &[u8] {
                self.buffer.as_ref().get(Self::LEN..).unwrap_or(&[])
            }

            $(
                $(#[$fdoc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as FieldIo>::read(self.buffer.as_ref(), $off)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $(
                #[doc = concat!("Sets the field read by [`Self::", stringify!($get), "`].")]
                #[inline]
                pub fn $set(&mut self, value: $ty) {
                    <$ty as FieldIo>::write(value, self.buffer.as_mut(), $off)
                }
            )*
        }
    };
}
pub(crate) use header_view;
